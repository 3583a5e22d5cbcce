-- A job claimed into a worker's buffer, not yet started there: if the worker dies, the
-- job is handed back without blame (only a job whose run killed its worker is a suspect).
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN prefetched boolean NOT NULL DEFAULT false;

-- Which tasks each live worker runs: a job whose task no live worker has waits, and says so.
ALTER TABLE {schema}.sqljobs_workers ADD COLUMN tasks text NOT NULL DEFAULT '[]';

-- Every task a worker of this database has registered, with the defaults its code gives
-- it, so an enqueue by name from a process that lacks the task (another service, the CLI)
-- gets the task's queue, priority, lease and retry policy, and a typo is refused.
CREATE TABLE {schema}.sqljobs_tasks (
    name         text             PRIMARY KEY,
    queue        text             NOT NULL,
    priority     integer          NOT NULL,
    lease        double precision NOT NULL,
    max_attempts integer          NOT NULL,
    deadline     double precision,
    updated_at   timestamptz      NOT NULL
);
