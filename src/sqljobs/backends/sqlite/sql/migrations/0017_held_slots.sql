-- A job that left `running` while its handler runs on (cancelled, or timed out and
-- retried) keeps lease_until while its worker renews it: it still holds its limit key's
-- slot until the handler has ended. Limited claims count those rows by key from here.
CREATE INDEX sqljobs_jobs_held ON sqljobs_jobs (limit_key)
    WHERE lease_until IS NOT NULL AND state <> 'running' AND limit_key IS NOT NULL;
