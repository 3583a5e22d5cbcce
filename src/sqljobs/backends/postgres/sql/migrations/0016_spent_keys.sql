-- Business keys outlive their jobs' rows (guarantee 4). A keyed job records how long its
-- key is kept once the pruner deletes its row (NULL: as long as the pruning App says);
-- the pruner keeps the key here, in the statement that deletes the row, and a keyed
-- enqueue looks here (one primary key probe) in its insert.
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN key_retention double precision;
CREATE TABLE {schema}.sqljobs_spent_keys (
    key        text        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    task       text        NOT NULL,
    state      text        NOT NULL,
    spent_at   timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX sqljobs_spent_keys_expiry ON {schema}.sqljobs_spent_keys (expires_at);
CREATE INDEX sqljobs_spent_keys_job ON {schema}.sqljobs_spent_keys (job_id);
