-- The run_at index that tells a worker when the next delayed job falls due must never be
-- a plan for claims. With stale statistics (a table analysed while nearly empty, then a
-- burst of enqueues) the planner took it for `run_at <= now()`, fetched every pending row
-- and sorted them, a cost growing with the backlog, where the claim index reads only the
-- rows a claim takes. Its predicate now adds `run_at > '-infinity'`, which no claim
-- states (nor implies), so only next_due, which does, can use it.
DROP INDEX {schema}.sqljobs_jobs_due;
CREATE INDEX sqljobs_jobs_next_due ON {schema}.sqljobs_jobs (run_at)
    WHERE state = 'pending' AND crashes < 2 AND run_at > '-infinity';
