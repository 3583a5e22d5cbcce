-- A keyed enqueue whose statement's snapshot predates a prune's commit cannot see the key
-- that prune kept, and its insert, having waited for the prune, finds the old row gone.
-- It calls this (only then: it inserted while its snapshot still showed a row with that
-- key), whose query, in a VOLATILE function at READ COMMITTED, reads a fresh snapshot:
-- the job the key names if the key was kept meanwhile, else NULL (the row went without
-- keeping its key: the new job stands). With `undo` it fails instead of answering, as a
-- serialization failure, so that an autocommit statement is rolled back and run again.
-- At REPEATABLE READ or SERIALIZABLE no fresh snapshot exists: it fails the same way.
CREATE FUNCTION {schema}.sqljobs_key_kept_meanwhile(k text, at double precision, undo boolean)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    kept bigint;
    level text := current_setting('transaction_isolation');
BEGIN
    IF level <> 'read committed' THEN
        RAISE EXCEPTION 'sqljobs: the job keyed % was deleted while this transaction ran at '
            '%, whose snapshot cannot show whether the pruner kept its key: roll back and '
            'run the transaction again', k, level
            USING ERRCODE = 'serialization_failure';
    END IF;
    SELECT job_id INTO kept FROM {schema}.sqljobs_spent_keys
    WHERE key = k AND expires_at > to_timestamp(at);
    IF kept IS NOT NULL AND undo THEN
        RAISE EXCEPTION 'sqljobs: the job keyed % was pruned while this enqueue waited on '
            'it; run the enqueue again to be answered with its kept key', k
            USING ERRCODE = 'serialization_failure';
    END IF;
    RETURN kept;
END
$$;
