-- A job's children, for the dashboard's job page: only jobs that have parents are indexed,
-- so a queue without dependencies pays nothing for it.
CREATE INDEX sqljobs_jobs_dependent ON sqljobs_jobs (id) WHERE parents IS NOT NULL;
