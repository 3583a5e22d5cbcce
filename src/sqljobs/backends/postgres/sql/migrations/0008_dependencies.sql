-- Job dependencies (sqljobs.dependencies): a `waiting` state, a job's parents and policy,
-- and the edges from parents that have not ended to their children. Adding columns with
-- constant defaults changes only the catalogue (no table rewrite); the state's CHECK is
-- replaced in place.
ALTER TABLE {schema}.sqljobs_jobs DROP CONSTRAINT sqljobs_jobs_state_check;
ALTER TABLE {schema}.sqljobs_jobs ADD CONSTRAINT sqljobs_jobs_state_check
    CHECK (state IN ('pending', 'waiting', 'running', 'done', 'dead', 'cancelled'));
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN parents bigint[];
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN after_policy text
    CHECK (after_policy IN ('done', 'always'));
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN waiting_on integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN children integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.sqljobs_jobs ADD COLUMN collected jsonb;

CREATE TABLE {schema}.sqljobs_deps (
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
