-- Control over work in flight: results, progress, paused queues; retention by state;
-- counts that cost no more with a million finished jobs kept.

-- A task's return value (JSON), and what its handler last reported with ctx.progress().
ALTER TABLE sqljobs_jobs ADD COLUMN result TEXT;
ALTER TABLE sqljobs_jobs ADD COLUMN progress TEXT;

-- One index on ended jobs serves the pruner and the stats, never the table: by state and
-- queue, then age. The pruner deletes each state's old rows queue by queue (the queues
-- found by a skip scan); stats count dead jobs exactly and done and cancelled ones up to a
-- cap per queue (sqljobs.stats). One index, not two (by state and age, and by state and
-- queue): every job that ends writes each, so the second is one more index write for
-- every job. The predicate names the states that are not ended, the rest of the CHECK's
-- list: SQLite tests `state IN ('done', 'dead', 'cancelled')` by building a lookup table
-- each time, on every write of a job.
DROP INDEX sqljobs_jobs_finished;
CREATE INDEX sqljobs_jobs_ended ON sqljobs_jobs (state, queue, finished_at)
    WHERE state <> 'pending' AND state <> 'running';

-- A paused queue: claims skip its jobs (enqueues and schedules still add to it).
CREATE TABLE sqljobs_queues (
    name       TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    paused_at  REAL,
    updated_at REAL    NOT NULL
);
