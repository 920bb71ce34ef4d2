-- The channel the statements notify on, for the LISTEN connection.
SELECT {{.ChannelSQL}}
