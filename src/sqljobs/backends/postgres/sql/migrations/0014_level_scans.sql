-- Claims and next_due read the claim indexes level by level, (queue, priority), each
-- level's due head (queries.sql, levels_of_queues).
-- next_due no longer walks the run_at index: nothing reads it, and dropping it spares every
-- enqueue and every claim an index entry to write.
DROP INDEX {schema}.sqljobs_jobs_next_due;
-- The index of workers of every queue gets a predicate their statements alone state, so a
-- plan for one queue's level cannot take it and filter it by queue, walking another
-- queue's backlog (a generic plan did: the smaller index was its cheaper guess).
DROP INDEX {schema}.sqljobs_jobs_claim_any;
CREATE INDEX sqljobs_jobs_claim_any ON {schema}.sqljobs_jobs (priority DESC, run_at, id)
    WHERE state = 'pending' AND crashes < 2 AND limit_key IS NULL AND run_at > '-infinity';
