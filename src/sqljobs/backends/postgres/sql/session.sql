-- Session settings for PostgreSQL (sqljobs.backends.postgres).

-- name: configure
-- Every pooled connection: queue statements are short and planned once; JIT compiling
-- them costs more than it saves.
SET jit = off

-- name: ordered_scans
-- Every pooled connection: no bitmap scans. On a table whose statistics say it is nearly
-- empty (new, or bulk-loaded since the last ANALYZE), the planner took a claim as a bitmap
-- scan of every pending row plus a sort, its time growing with the backlog, where
-- walking the claim index in order stops at the limit. Queue statements are all index
-- lookups and short ordered scans, which a bitmap scan never beats by much.
SET enable_bitmapscan = off

-- name: asynchronous_commit
-- A worker's own writes may skip waiting for the WAL flush (its synchronous_commit=False).
SET synchronous_commit = off

-- name: durable_transaction
-- Enqueues, effects and ctx.transaction() stay durable whatever the pool's setting.
SET LOCAL synchronous_commit = on

-- name: snapshot
-- Several reads that must agree (stats): one snapshot for the whole transaction.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY
