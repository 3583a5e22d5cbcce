-- The migration runner's own statements (sqljobs.backends.migrations).

-- name: prepare_migrations
CREATE TABLE IF NOT EXISTS sqljobs_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);

-- name: applied_migrations
SELECT version, name FROM sqljobs_migrations

-- name: record_migration
INSERT INTO sqljobs_migrations VALUES (:version, :name, :now)

-- name: renumber_migration
UPDATE sqljobs_migrations SET version = :new WHERE version = :old
