-- How long after its job finishes a key keeps refusing duplicates (seconds; NULL: as long
-- as the job is kept). A key released that way moves to released_key, for inspection.
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN key_hold double precision;
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN released_key text;
CREATE INDEX sqljobs_jobs_released_key ON {schema}.sqljobs_jobs (released_key)
    WHERE released_key IS NOT NULL;

-- External effects as a state machine: intent recorded before the call, outcome after.
CREATE TABLE {schema}.sqljobs_effects (
    key        text        PRIMARY KEY,
    state      text        NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
    result     text,
    error      text,
    job_id     bigint,
    holder     text,
    held_until timestamptz,
    attempts   integer     NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
