-- 0020: debounced enqueues, and enqueue from SQL (a trigger, psql, another language).

-- Jobs count the debounced enqueues that replaced their arguments.
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN debounced integer NOT NULL DEFAULT 0;

-- A debounced enqueue (with_options(debounce=...)), one row as insert_jobs reads them: a
-- new job, or its key's job, still pending, with this enqueue's payload and start. The
-- conflict waits for the row's lock, so updates land in commit order (the last write
-- wins); a key naming a job already claimed or ended is released for a new window.
-- SECURITY DEFINER: a producer, who may not change a job's payload, moves its key's
-- pending job and nothing else.
CREATE FUNCTION {schema}.sqljobs_debounce(job jsonb)
RETURNS TABLE (job_id bigint, created boolean) LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    got bigint;
BEGIN
    FOR attempt IN 1..5 LOOP
        new_id := nextval('{schema}.sqljobs_jobs_id_seq'::regclass);
        INSERT INTO {schema}.sqljobs_jobs AS j
            (id, queue, task, payload, key, priority, run_at, deadline_at, max_attempts,
             lease, key_hold, limit_key, limit_max, rate_max, rate_window, key_retention)
        VALUES (new_id, job ->> 0, job ->> 1, job ->> 2, job ->> 3, (job ->> 4)::int,
                coalesce(now() + make_interval(secs => (job ->> 10)::float8),
                         to_timestamp((job ->> 5)::float8)),
                to_timestamp((job ->> 6)::float8), (job ->> 7)::int, (job ->> 8)::float8,
                (job ->> 9)::float8, job ->> 11, (job ->> 12)::int, (job ->> 13)::int,
                (job ->> 14)::float8, (job ->> 15)::float8)
        ON CONFLICT (key) WHERE key IS NOT NULL DO UPDATE
            SET payload = excluded.payload, run_at = excluded.run_at,
                debounced = j.debounced + 1
            WHERE j.state = 'pending'
        RETURNING j.id INTO got;
        IF got IS NOT NULL THEN
            job_id := got;
            created := got = new_id;
            RETURN NEXT;
            RETURN;
        END IF;
        UPDATE {schema}.sqljobs_jobs SET released_key = key, key = NULL
        WHERE key = job ->> 3 AND state <> 'pending';
    END LOOP;
    RAISE EXCEPTION 'sqljobs: the job keyed % was claimed again and again while a debounced '
        'enqueue ran; run the enqueue again', job ->> 3
        USING ERRCODE = 'serialization_failure';
END
$$;
REVOKE ALL ON FUNCTION {schema}.sqljobs_debounce(jsonb) FROM PUBLIC;

-- Enqueue from SQL, in the caller's transaction: the checks, defaults (from the task
-- catalogue the workers write), keys and wake-up of a Python enqueue. Returns the job's
-- id; with a key already taken, the id of the job that has it.
CREATE FUNCTION {schema}.sqljobs_enqueue(
    task text,
    args jsonb DEFAULT '[]',
    kwargs jsonb DEFAULT '{}',
    key text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    queue text DEFAULT NULL,
    priority integer DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    t record;
    q text;
    start timestamptz := coalesce(sqljobs_enqueue.run_at, now());
    lim_key text;
    lim_max integer;
    r_max integer;
    r_window double precision;
    new_id bigint;
    found_id bigint;
BEGIN
    IF sqljobs_enqueue.task IS NULL OR sqljobs_enqueue.task = ''
            OR length(sqljobs_enqueue.task) > 500 THEN
        RAISE EXCEPTION 'sqljobs.enqueue: task must be a name of 1 to 500 characters, got %',
            coalesce(quote_literal(sqljobs_enqueue.task), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF args IS NULL OR jsonb_typeof(args) <> 'array' THEN
        RAISE EXCEPTION 'sqljobs.enqueue(%): args must be a JSON array of positional '
            'arguments, got %; pass keyword arguments as kwargs => ''{...}''::jsonb',
            sqljobs_enqueue.task, coalesce(jsonb_typeof(args), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF kwargs IS NULL OR jsonb_typeof(kwargs) <> 'object' THEN
        RAISE EXCEPTION 'sqljobs.enqueue(%): kwargs must be a JSON object of keyword '
            'arguments, got %', sqljobs_enqueue.task, coalesce(jsonb_typeof(kwargs), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF sqljobs_enqueue.key IS NOT NULL
            AND (sqljobs_enqueue.key = '' OR length(sqljobs_enqueue.key) > 500) THEN
        RAISE EXCEPTION 'sqljobs.enqueue(%): key must be NULL or 1 to 500 characters',
            sqljobs_enqueue.task USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF start < '0001-01-01 00:00:00+00' OR start > '9999-12-31 23:59:59+00' THEN
        RAISE EXCEPTION 'sqljobs.enqueue(%): run_at % lies outside the years 1 to 9999',
            sqljobs_enqueue.task, start USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.queue, c.priority, c.lease, c.max_attempts, c.deadline, c.concurrency, c.keyed,
           c.rate_max, c.rate_window
    INTO t FROM {schema}.sqljobs_tasks AS c WHERE c.name = sqljobs_enqueue.task;
    q := coalesce(sqljobs_enqueue.queue, t.queue, 'default');
    IF q !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'sqljobs.enqueue(%): queue name % is not valid: use 1-64 letters, '
            'digits, ''_'', ''-'', ''.'', '':''', sqljobs_enqueue.task, quote_literal(q)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF t.keyed THEN
        RAISE EXCEPTION 'sqljobs.enqueue(%): this task limits its concurrency per key, by a '
            'function in the service that defines it; enqueue it from Python with '
            'concurrency_key=...', sqljobs_enqueue.task
            USING ERRCODE = 'feature_not_supported';
    ELSIF t.concurrency IS NOT NULL OR t.rate_max IS NOT NULL THEN
        lim_key := sqljobs_enqueue.task;
        lim_max := t.concurrency;
        r_max := t.rate_max;
        r_window := t.rate_window;
    ELSE
        SELECT 'queue:' || q, l.concurrency, l.rate_max, l.rate_window
        INTO lim_key, lim_max, r_max, r_window
        FROM {schema}.sqljobs_queues AS l
        WHERE l.name = q AND (l.concurrency IS NOT NULL OR l.rate_max IS NOT NULL);
    END IF;
    FOR attempt IN 1..5 LOOP
        IF sqljobs_enqueue.key IS NOT NULL THEN
            -- an ended job whose key_scope has run out gives its key up (as release_keys)
            UPDATE {schema}.sqljobs_jobs SET released_key = key, key = NULL
            WHERE key = sqljobs_enqueue.key AND state IN ('done', 'dead', 'cancelled')
              AND key_hold IS NOT NULL AND finished_at + make_interval(secs => key_hold) <= now();
            SELECT s.job_id INTO found_id FROM {schema}.sqljobs_spent_keys AS s
            WHERE s.key = sqljobs_enqueue.key AND s.expires_at > now();
            IF found_id IS NOT NULL THEN
                RETURN found_id;
            END IF;
        END IF;
        new_id := NULL;
        INSERT INTO {schema}.sqljobs_jobs
            (queue, task, payload, key, priority, run_at, deadline_at, max_attempts, lease,
             limit_key, limit_max, rate_max, rate_window)
        VALUES (q, sqljobs_enqueue.task,
                jsonb_build_object('args', args, 'kwargs', kwargs)::text,
                sqljobs_enqueue.key, coalesce(sqljobs_enqueue.priority, t.priority, 0), start,
                now() + make_interval(secs => t.deadline), coalesce(t.max_attempts, 5),
                coalesce(t.lease, 30), lim_key, lim_max, r_max, r_window)
        ON CONFLICT (key) WHERE key IS NOT NULL DO NOTHING
        RETURNING id INTO new_id;
        IF new_id IS NOT NULL THEN
            PERFORM pg_notify('sqljobs_{schema}', q);
            RETURN new_id;
        END IF;
        SELECT j.id INTO found_id FROM {schema}.sqljobs_jobs AS j
        WHERE j.key = sqljobs_enqueue.key;
        IF found_id IS NOT NULL THEN
            RETURN found_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'sqljobs.enqueue(%): the job keyed % was deleted again and again while '
        'this enqueue ran; run it again', sqljobs_enqueue.task, sqljobs_enqueue.key
        USING ERRCODE = 'serialization_failure';
END
$$;
REVOKE ALL ON FUNCTION {schema}.sqljobs_enqueue(text, jsonb, jsonb, text, timestamptz, text,
                                                integer) FROM PUBLIC;

-- `sqljobs.enqueue(...)`, the name the docs use, for the tables in the default schema
-- (public) or in one named sqljobs; a role that may not create a schema goes without it.
DO $alias$
BEGIN
    IF '{schema}' NOT IN ('public', 'sqljobs') OR to_regproc('sqljobs.enqueue') IS NOT NULL THEN
        RETURN;
    END IF;
    IF to_regnamespace('sqljobs') IS NULL THEN
        IF NOT has_database_privilege(current_database(), 'CREATE') THEN
            RAISE NOTICE 'sqljobs: no CREATE right on this database: call '
                '{schema}.sqljobs_enqueue(...) instead of sqljobs.enqueue(...)';
            RETURN;
        END IF;
        CREATE SCHEMA sqljobs;
    END IF;
    CREATE FUNCTION sqljobs.enqueue(
        task text,
        args jsonb DEFAULT '[]',
        kwargs jsonb DEFAULT '{}',
        key text DEFAULT NULL,
        run_at timestamptz DEFAULT NULL,
        queue text DEFAULT NULL,
        priority integer DEFAULT NULL
    ) RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'SELECT {schema}.sqljobs_enqueue($1, $2, $3, $4, $5, $6, $7)';
    REVOKE ALL ON FUNCTION sqljobs.enqueue(text, jsonb, jsonb, text, timestamptz, text, integer)
        FROM PUBLIC;
END
$alias$;
