-- The migration runner's own statements (sqljobs.backends.migrations). {schema} is the
-- configured schema, a checked identifier.

-- name: prepare_migrations
-- One runner at a time per schema: the others wait here, then find the work done.
SELECT pg_advisory_xact_lock(hashtext('sqljobs_{schema}'));
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.sqljobs_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())

-- name: applied_migrations
SELECT version, name FROM {schema}.sqljobs_migrations

-- name: record_migration
INSERT INTO {schema}.sqljobs_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: renumber_migration
UPDATE {schema}.sqljobs_migrations SET version = %(new)s WHERE version = %(old)s
