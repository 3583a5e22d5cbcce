-- Wake-ups (sqljobs.notifiers.postgres). {channel} is the notifier's channel, a checked
-- identifier. The enqueue statements in queries.sql carry their own pg_notify.

-- name: listen
LISTEN {channel}

-- name: notify
-- After a commit: a pipelined batch's last statement, a trailing NOTIFY, a new schedule.
SELECT pg_notify(%(channel)s, q) FROM unnest(%(notify)s::text[]) AS q
