-- Session settings for PostgreSQL (sqljobs.backends.postgres).

-- name: configure
-- Every pooled connection: queue statements are short and planned once; JIT compiling
-- them costs more than it saves.
SET jit = off

-- name: asynchronous_commit
-- A worker's own writes may skip waiting for the WAL flush (its synchronous_commit=False).
SET synchronous_commit = off

-- name: durable_transaction
-- Enqueues, effects and ctx.transaction() stay durable whatever the pool's setting.
SET LOCAL synchronous_commit = on
