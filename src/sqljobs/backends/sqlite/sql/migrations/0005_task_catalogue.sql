-- A job claimed into a worker's buffer, not yet started there: if the worker dies, the
-- job is handed back without blame (only a job whose run killed its worker is a suspect).
ALTER TABLE sqljobs_jobs ADD COLUMN prefetched INTEGER NOT NULL DEFAULT 0;

-- Which tasks each live worker runs: a job whose task no live worker has waits, and says so.
ALTER TABLE sqljobs_workers ADD COLUMN tasks TEXT NOT NULL DEFAULT '[]';

-- Every task a worker of this database has registered, with the defaults its code gives
-- it, so an enqueue by name from a process that lacks the task (another service, the CLI)
-- gets the task's queue, priority, lease and retry policy, and a typo is refused.
CREATE TABLE sqljobs_tasks (
    name         TEXT PRIMARY KEY,
    queue        TEXT NOT NULL,
    priority     INTEGER NOT NULL,
    lease        REAL NOT NULL,
    max_attempts INTEGER NOT NULL,
    deadline     REAL,
    updated_at   REAL NOT NULL
);
