-- Limited claims and hand-overs read each limit key level by level, (key, priority), each
-- level's due head (limits.sql, levels_of_keys).
-- The index of when the next delayed limited job falls due gets a predicate that only
-- next_limited_due states, so no plan for a key's level can take it and read every due
-- limited job to find the level's few (a generic plan did: 5,000 due jobs of a lower
-- priority read once for each higher level).
DROP INDEX {schema}.sqljobs_jobs_limited_due;
CREATE INDEX sqljobs_jobs_limited_due ON {schema}.sqljobs_jobs (run_at)
    WHERE limit_key IS NOT NULL AND run_at > '-infinity';
