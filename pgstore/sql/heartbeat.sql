-- The LISTEN connection's heartbeat, sent through the pool on
-- the statements' channel.
SELECT pg_notify({{.ChannelSQL}}, $1)
