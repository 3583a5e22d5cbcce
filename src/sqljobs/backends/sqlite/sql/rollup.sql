-- Named statements of the metrics rollup (sqljobs.rollup): workers add their tallies at
-- each heartbeat; app.throughput(), the Prometheus collector and the pruner read and trim.

-- name: add_metric_minute
INSERT INTO sqljobs_metric_minutes (minute, queue, task, outcome, series, le, amount)
VALUES (:minute, :queue, :task, :outcome, :series, :le, :amount)
ON CONFLICT (minute, queue, task, outcome, series, le)
DO UPDATE SET amount = amount + excluded.amount

-- name: add_metric_total
INSERT INTO sqljobs_metric_totals (queue, task, outcome, series, le, amount)
VALUES (:queue, :task, :outcome, :series, :le, :amount)
ON CONFLICT (queue, task, outcome, series, le)
DO UPDATE SET amount = amount + excluded.amount

-- name: attempts_by_minute
-- Attempts by minute and outcome from :since on (of one queue, or of all when NULL).
SELECT minute, outcome, sum(amount) AS attempts
FROM sqljobs_metric_minutes
WHERE minute >= :since AND series = 'attempts' AND (:queue IS NULL OR queue = :queue)
GROUP BY minute, outcome

-- name: metric_totals
SELECT queue, task, outcome, series, le, amount FROM sqljobs_metric_totals

-- name: metric_label_sets
-- What the metrics show before anything is counted: each task of the catalogue (workers
-- write it when they start) with its queue, and each schedule's task and queue.
SELECT queue, name AS task, 0 AS scheduled FROM sqljobs_tasks
UNION
SELECT queue, task, 1 AS scheduled FROM sqljobs_schedules

-- name: prune_metric_minutes
-- Up to :limit whole minutes older than :before (each a few rows per task and outcome).
DELETE FROM sqljobs_metric_minutes WHERE minute IN (
    SELECT DISTINCT minute FROM sqljobs_metric_minutes WHERE minute < :before
    ORDER BY minute LIMIT :limit)
