-- Connection settings and transaction control for SQLite (sqljobs.backends.sqlite).
-- PRAGMAs take no bound parameters: {placeholders} are filled from checked settings.

-- name: busy_timeout
PRAGMA busy_timeout = {milliseconds}

-- name: journal_mode_wal
-- Answers the mode now in force: anything but 'wal' is refused.
PRAGMA journal_mode = WAL

-- name: synchronous
PRAGMA synchronous = {level}

-- name: foreign_keys
PRAGMA foreign_keys = ON

-- name: temp_store
-- The claim's ORDER BY and window sort build a temporary b-tree; kept in a file (the
-- default), even a claim of one job sorted through a temporary file. What sqljobs sorts
-- is bounded by a LIMIT or a page size, so memory holds it.
PRAGMA temp_store = MEMORY

-- name: begin_write
-- Every write takes the write lock up front, so a busy database is waited out by the busy
-- timeout here, never half-way through a transaction.
BEGIN IMMEDIATE

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- name: data_version
-- A counter in shared memory that moves when another connection commits (no table
-- access): the change check of sqljobs.notifiers.sqlite.
PRAGMA data_version

-- name: begin_read
-- Several reads that must agree (stats): one snapshot, and no write lock taken.
BEGIN DEFERRED
