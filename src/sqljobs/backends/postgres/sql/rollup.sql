-- Named statements of the metrics rollup (sqljobs.rollup): workers add their tallies at
-- each heartbeat; app.throughput(), the Prometheus collector and the pruner read and trim.
-- Two workers adding to one row at once: the second upsert waits for the first's row
-- lock, then adds to what it committed, so no increment is lost.

-- name: add_metric_minute
INSERT INTO {schema}.sqljobs_metric_minutes AS m
    (minute, queue, task, outcome, series, le, amount)
VALUES (%(minute)s, %(queue)s, %(task)s, %(outcome)s, %(series)s, %(le)s, %(amount)s)
ON CONFLICT (minute, queue, task, outcome, series, le)
DO UPDATE SET amount = m.amount + excluded.amount

-- name: add_metric_total
INSERT INTO {schema}.sqljobs_metric_totals AS t (queue, task, outcome, series, le, amount)
VALUES (%(queue)s, %(task)s, %(outcome)s, %(series)s, %(le)s, %(amount)s)
ON CONFLICT (queue, task, outcome, series, le)
DO UPDATE SET amount = t.amount + excluded.amount

-- name: attempts_by_minute
-- Attempts by minute and outcome from %(since)s on (of one queue, or of all when NULL).
SELECT minute, outcome, sum(amount) AS attempts
FROM {schema}.sqljobs_metric_minutes
WHERE minute >= %(since)s AND series = 'attempts'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY minute, outcome

-- name: metric_totals
SELECT queue, task, outcome, series, le, amount FROM {schema}.sqljobs_metric_totals

-- name: metric_label_sets
-- What the metrics show before anything is counted: each task of the catalogue (workers
-- write it when they start) with its queue, and each schedule's task and queue.
SELECT queue, name AS task, 0 AS scheduled FROM {schema}.sqljobs_tasks
UNION
SELECT queue, task, 1 AS scheduled FROM {schema}.sqljobs_schedules

-- name: prune_metric_minutes
-- Up to %(limit)s whole minutes older than %(before)s (each a few rows per task and outcome).
DELETE FROM {schema}.sqljobs_metric_minutes WHERE minute IN (
    SELECT DISTINCT minute FROM {schema}.sqljobs_metric_minutes WHERE minute < %(before)s
    ORDER BY minute LIMIT %(limit)s)
