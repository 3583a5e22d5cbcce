-- How long after its job finishes a key keeps refusing duplicates (seconds; NULL: as long
-- as the job is kept). A key released that way moves to released_key, for inspection.
ALTER TABLE sqljobs_jobs ADD COLUMN key_hold REAL;
ALTER TABLE sqljobs_jobs ADD COLUMN released_key TEXT;
CREATE INDEX sqljobs_jobs_released_key ON sqljobs_jobs (released_key)
    WHERE released_key IS NOT NULL;

-- External effects as a state machine: intent recorded before the call, outcome after.
CREATE TABLE sqljobs_effects (
    key        TEXT PRIMARY KEY,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
    result     TEXT,
    error      TEXT,
    job_id     INTEGER,
    holder     TEXT,
    held_until REAL,
    attempts   INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
