-- Durable workflows (sqljobs.workflows): a workflow is a job whose steps are checkpointed
-- here, one row a position; a parked workflow is `waiting` for a time (wake_at), an event
-- (wait_event) or its children (waiting_on, through sqljobs_deps); events are kept in
-- the order they committed.
ALTER TABLE sqljobs_jobs ADD COLUMN wake_at REAL;
ALTER TABLE sqljobs_jobs ADD COLUMN wait_event TEXT;
CREATE INDEX sqljobs_jobs_wake ON sqljobs_jobs (wake_at)
    WHERE state = 'waiting' AND wake_at IS NOT NULL;
CREATE INDEX sqljobs_jobs_wait_event ON sqljobs_jobs (wait_event)
    WHERE state = 'waiting' AND wait_event IS NOT NULL;

CREATE TABLE sqljobs_workflow_steps (
    job_id      INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('running', 'waiting', 'done', 'failed')),
    result      TEXT,
    error       TEXT,
    detail      TEXT    NOT NULL DEFAULT '{}',
    attempt     INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    ended_at    REAL,
    PRIMARY KEY (job_id, position)
) WITHOUT ROWID;
-- A job's steps go with its row (pruned, or deleted by an operator).
CREATE TRIGGER sqljobs_workflow_steps_pruned AFTER DELETE ON sqljobs_jobs
BEGIN
    DELETE FROM sqljobs_workflow_steps WHERE job_id = old.id;
END;

CREATE TABLE sqljobs_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL,
    payload     TEXT,
    emitted_at  REAL    NOT NULL
);
CREATE INDEX sqljobs_events_name ON sqljobs_events (name, id);
CREATE INDEX sqljobs_events_emitted ON sqljobs_events (emitted_at);
