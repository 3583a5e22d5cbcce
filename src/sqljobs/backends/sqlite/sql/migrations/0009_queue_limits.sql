-- Limits on whole queues (app.limit_queue): workers record them beside a queue's pause,
-- for enqueues by name from services that lack the code defining them.
ALTER TABLE sqljobs_queues ADD COLUMN concurrency INTEGER;
ALTER TABLE sqljobs_queues ADD COLUMN rate_max INTEGER;
ALTER TABLE sqljobs_queues ADD COLUMN rate_window REAL;
