-- The running jobs of each limit key, counted by every limited claim: read from the lease
-- index they were a scan of every running job (and of the entries a drain leaves behind
-- until vacuum), several heap pages a key; by key, a few index entries.
CREATE INDEX sqljobs_jobs_limited_running ON {schema}.sqljobs_jobs (limit_key)
    WHERE state = 'running' AND limit_key IS NOT NULL;
