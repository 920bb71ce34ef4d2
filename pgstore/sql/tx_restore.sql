-- Put back the session's lock_timeout after a claim statement of a claim's
-- transaction (see sql/tx_limits.sql).
SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true)
