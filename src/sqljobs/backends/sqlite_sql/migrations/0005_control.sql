-- Control over work in flight: results, progress, paused queues; retention by state;
-- counts that cost no more with a million finished jobs kept.

-- A task's return value (JSON), and what its handler last reported with ctx.progress().
ALTER TABLE sqljobs_jobs ADD COLUMN result TEXT;
ALTER TABLE sqljobs_jobs ADD COLUMN progress TEXT;

-- The pruner deletes done, cancelled and dead jobs, each state after its own age.
DROP INDEX sqljobs_jobs_finished;
CREATE INDEX sqljobs_jobs_finished ON sqljobs_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;
-- Stats count ended jobs from this index, never from the table: dead exactly, done and
-- cancelled (which grow with retention) only up to a cap per queue (sqljobs.stats). Not
-- sqljobs_jobs_finished with queue added: the pruner asks for one state's oldest rows
-- across all queues, which (state, queue, finished_at) cannot give without reading every
-- queue's young rows too. The predicate names the states that are not ended, the rest of
-- the CHECK's list: SQLite tests `state IN ('done', 'dead', 'cancelled')` by building a
-- lookup table each time, and a bare loop claiming and finishing jobs ran 30% slower.
CREATE INDEX sqljobs_jobs_ended ON sqljobs_jobs (state, queue)
    WHERE state <> 'pending' AND state <> 'running';

-- A paused queue: claims skip its jobs (enqueues and schedules still add to it).
CREATE TABLE sqljobs_queues (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    paused_at  REAL,
    updated_at REAL    NOT NULL
);
