-- Business keys outlive their jobs' rows (guarantee 4). A keyed job records how long its
-- key is kept once the pruner deletes its row (NULL: as long as the pruning App says);
-- the pruner keeps the key here, in the transaction that deletes the row, and a keyed
-- enqueue looks here (one primary key probe) before it inserts.
ALTER TABLE sqljobs_jobs ADD COLUMN key_retention REAL;
CREATE TABLE sqljobs_spent_keys (
    key        TEXT    PRIMARY KEY,
    job_id     INTEGER NOT NULL,
    task       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    spent_at   REAL    NOT NULL,
    expires_at REAL    NOT NULL
) WITHOUT ROWID;
CREATE INDEX sqljobs_spent_keys_expiry ON sqljobs_spent_keys (expires_at);
CREATE INDEX sqljobs_spent_keys_job ON sqljobs_spent_keys (job_id);
