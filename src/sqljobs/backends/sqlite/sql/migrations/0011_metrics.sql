-- The metrics rollup (sqljobs.rollup): attempts by outcome, duration and enqueue-to-start
-- histograms, schedule lag. Workers add to both tables at each heartbeat. The minutes
-- are pruned after a day; the totals, which Prometheus's counters read, never are.
CREATE TABLE sqljobs_metric_minutes (
    minute  INTEGER NOT NULL, -- Unix seconds at the start of the minute
    queue   TEXT    NOT NULL,
    task    TEXT    NOT NULL,
    outcome TEXT    NOT NULL, -- done, retried, dead, cancelled, lease_expired, crashed; '' for lag
    series  TEXT    NOT NULL, -- attempts, duration, duration_sum, wait, wait_sum, schedule_lag...
    le      REAL    NOT NULL, -- a bucket's upper bound, seconds (inf: the last, or not a bucket)
    amount  REAL    NOT NULL,
    PRIMARY KEY (minute, queue, task, outcome, series, le)
) WITHOUT ROWID;
CREATE TABLE sqljobs_metric_totals (
    queue   TEXT NOT NULL,
    task    TEXT NOT NULL,
    outcome TEXT NOT NULL,
    series  TEXT NOT NULL,
    le      REAL NOT NULL,
    amount  REAL NOT NULL,
    PRIMARY KEY (queue, task, outcome, series, le)
) WITHOUT ROWID;
