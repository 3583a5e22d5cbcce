-- The metrics rollup (sqljobs.rollup): attempts by outcome, duration and enqueue-to-start
-- histograms, schedule lag. Workers add to both tables at each heartbeat. The minutes
-- are pruned after a day; the totals, which Prometheus's counters read, never are.
CREATE TABLE {schema}.sqljobs_metric_minutes (
    minute  bigint           NOT NULL, -- Unix seconds at the start of the minute
    queue   text             NOT NULL,
    task    text             NOT NULL,
    outcome text             NOT NULL, -- done, retried, dead, cancelled, lease_expired, ...
    series  text             NOT NULL, -- attempts, duration, duration_sum, wait, wait_sum, ...
    le      double precision NOT NULL, -- a bucket's upper bound, seconds (Infinity: the last)
    amount  double precision NOT NULL,
    PRIMARY KEY (minute, queue, task, outcome, series, le)
);
CREATE TABLE {schema}.sqljobs_metric_totals (
    queue   text             NOT NULL,
    task    text             NOT NULL,
    outcome text             NOT NULL,
    series  text             NOT NULL,
    le      double precision NOT NULL,
    amount  double precision NOT NULL,
    PRIMARY KEY (queue, task, outcome, series, le)
);
