-- 0020: enqueue from SQL, for a program without sqljobs: INSERT INTO sqljobs_enqueue
-- (task, args, ...) VALUES (...) checks the row, fills in the task's defaults from the
-- catalogue the workers write, and keeps keys as a Python enqueue does.
-- Jobs count the debounced enqueues that replaced their arguments.
ALTER TABLE sqljobs_jobs ADD COLUMN debounced INTEGER NOT NULL DEFAULT 0;

CREATE VIEW sqljobs_enqueue (task, args, kwargs, key, run_at, queue, priority) AS
    SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

CREATE TRIGGER sqljobs_enqueue_insert INSTEAD OF INSERT ON sqljobs_enqueue
BEGIN
    SELECT RAISE(ABORT, 'sqljobs_enqueue: task must be a name of 1 to 500 characters')
    WHERE typeof(NEW.task) <> 'text' OR length(NEW.task) NOT BETWEEN 1 AND 500;
    SELECT RAISE(ABORT, 'sqljobs_enqueue: args must be a JSON array of positional arguments (keyword arguments go in kwargs, a JSON object)')
    WHERE NEW.args IS NOT NULL
      AND (typeof(NEW.args) <> 'text' OR NOT json_valid(NEW.args)
           OR json_type(NEW.args) <> 'array');
    SELECT RAISE(ABORT, 'sqljobs_enqueue: kwargs must be a JSON object of keyword arguments')
    WHERE NEW.kwargs IS NOT NULL
      AND (typeof(NEW.kwargs) <> 'text' OR NOT json_valid(NEW.kwargs)
           OR json_type(NEW.kwargs) <> 'object');
    SELECT RAISE(ABORT, 'sqljobs_enqueue: key must be NULL or a text of 1 to 500 characters')
    WHERE NEW.key IS NOT NULL AND (typeof(NEW.key) <> 'text' OR length(NEW.key) NOT BETWEEN 1 AND 500);
    SELECT RAISE(ABORT, 'sqljobs_enqueue: queue name is not valid: use 1-64 letters, digits, ''_'', ''-'', ''.'', '':''')
    WHERE NEW.queue IS NOT NULL
      AND (typeof(NEW.queue) <> 'text' OR length(NEW.queue) NOT BETWEEN 1 AND 64
           OR NEW.queue GLOB '*[^A-Za-z0-9_.:-]*');
    SELECT RAISE(ABORT, 'sqljobs_enqueue: priority must be an integer from -2147483648 to 2147483647')
    WHERE NEW.priority IS NOT NULL
      AND (typeof(NEW.priority) <> 'integer'
           OR NEW.priority NOT BETWEEN -2147483648 AND 2147483647);
    SELECT RAISE(ABORT, 'sqljobs_enqueue: run_at must be Unix seconds within the years 1 to 9999 (NULL: now)')
    WHERE NEW.run_at IS NOT NULL
      AND (typeof(NEW.run_at) NOT IN ('integer', 'real')
           OR NEW.run_at NOT BETWEEN -62135596800 AND 253402300799);
    SELECT RAISE(ABORT, 'sqljobs_enqueue: this task limits its concurrency per key, by a function in the service that defines it: enqueue it from Python with concurrency_key=...')
    FROM sqljobs_tasks WHERE name = NEW.task AND keyed;
    -- an ended job whose key_scope has run out gives its key up (as release_key)
    UPDATE sqljobs_jobs SET released_key = key, key = NULL
    WHERE NEW.key IS NOT NULL AND key = NEW.key AND state IN ('done', 'dead', 'cancelled')
      AND key_hold IS NOT NULL AND finished_at + key_hold <= (julianday('now') - 2440587.5) * 86400.0;
    INSERT INTO sqljobs_jobs
        (queue, task, payload, key, priority, run_at, created_at, deadline_at, max_attempts,
         lease, limit_key, limit_max, rate_max, rate_window)
    SELECT d.queue, NEW.task,
           json_object('args', json(coalesce(NEW.args, '[]')),
                       'kwargs', json(coalesce(NEW.kwargs, '{}'))),
           NEW.key, coalesce(NEW.priority, t.priority, 0), coalesce(NEW.run_at, d.now), d.now,
           d.now + t.deadline, coalesce(t.max_attempts, 5), coalesce(t.lease, 30.0),
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN NEW.task
                WHEN l.name IS NOT NULL THEN 'queue:' || d.queue END,
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN t.concurrency
                ELSE l.concurrency END,
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN t.rate_max
                ELSE l.rate_max END,
           CASE WHEN t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN t.rate_window
                ELSE l.rate_window END
    FROM (SELECT coalesce(NEW.queue, (SELECT queue FROM sqljobs_tasks WHERE name = NEW.task),
                          'default') AS queue,
                 (julianday('now') - 2440587.5) * 86400.0 AS now) AS d
    LEFT JOIN sqljobs_tasks AS t ON t.name = NEW.task
    LEFT JOIN sqljobs_queues AS l
           ON l.name = d.queue AND (l.concurrency IS NOT NULL OR l.rate_max IS NOT NULL)
    WHERE NEW.key IS NULL
       OR NOT EXISTS (SELECT 1 FROM sqljobs_spent_keys AS s
                      WHERE s.key = NEW.key AND s.expires_at > d.now)
    ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING;
END;
