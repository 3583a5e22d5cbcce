-- Concurrency limits (sqljobs.limits): a job's limit key and limit, and the catalogue's
-- record of a task's limit (for enqueues by name from a service that lacks the task).
ALTER TABLE sqljobs_jobs ADD COLUMN limit_key TEXT;
ALTER TABLE sqljobs_jobs ADD COLUMN limit_max INTEGER;
ALTER TABLE sqljobs_tasks ADD COLUMN concurrency INTEGER;
ALTER TABLE sqljobs_tasks ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;

-- Claims of jobs without a limit read indexes that hold none with one, so a backlog of
-- limited jobs waiting for slots never slows them.
DROP INDEX sqljobs_jobs_claim;
CREATE INDEX sqljobs_jobs_claim ON sqljobs_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
DROP INDEX sqljobs_jobs_claim_any;
CREATE INDEX sqljobs_jobs_claim_any ON sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;
DROP INDEX sqljobs_jobs_due;
CREATE INDEX sqljobs_jobs_due ON sqljobs_jobs (run_at)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL;

-- Limited jobs by key in claim order (the loose scan over keys, each key's first jobs),
-- and when the next delayed one falls due. Their running jobs are counted from the lease
-- index (the running set is small): one index fewer for every job to keep up.
CREATE INDEX sqljobs_jobs_limited ON sqljobs_jobs (limit_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND limit_key IS NOT NULL;
-- (not by state: an index whose columns and predicate a claim or an outcome leaves alone
-- costs those nothing; finished jobs' run_at lies in the past, before any it is asked for)
CREATE INDEX sqljobs_jobs_limited_due ON sqljobs_jobs (run_at)
    WHERE limit_key IS NOT NULL;
