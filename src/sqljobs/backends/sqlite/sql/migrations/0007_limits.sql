-- Concurrency and rate limits (sqljobs.limits): a job's limit key and limits, and the
-- catalogue's record of a task's (for enqueues by name from a service that lacks it).
ALTER TABLE sqljobs_jobs ADD COLUMN limit_key TEXT;
ALTER TABLE sqljobs_jobs ADD COLUMN limit_max INTEGER;
ALTER TABLE sqljobs_jobs ADD COLUMN rate_max INTEGER;
ALTER TABLE sqljobs_jobs ADD COLUMN rate_window REAL;
ALTER TABLE sqljobs_tasks ADD COLUMN concurrency INTEGER;
ALTER TABLE sqljobs_tasks ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqljobs_tasks ADD COLUMN rate_max INTEGER;
ALTER TABLE sqljobs_tasks ADD COLUMN rate_window REAL;

-- The starts of rate-limited jobs within their window, per key: a claim counts them, adds
-- its own and drops those the window has passed (a sliding window, exact at every claim).
CREATE TABLE sqljobs_starts (
    limit_key  TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX sqljobs_starts_key ON sqljobs_starts (limit_key, started_at);

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
