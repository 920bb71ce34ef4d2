-- Stats: the counts of live and abandoned claims, of retained and expired
-- results, the oldest live claim, the oldest abandoned lease, and the
-- table's size.
SELECT count(*) FILTER (WHERE state = 'claimed' AND lease_end > {{now "$1"}}),
       count(*) FILTER (WHERE state = 'claimed' AND lease_end <= {{now "$1"}}),
       count(*) FILTER (WHERE state = 'completed' AND (expires_at IS NULL OR expires_at > {{now "$1"}})),
       count(*) FILTER (WHERE state = 'completed' AND expires_at <= {{now "$1"}}),
       min(created_at) FILTER (WHERE state = 'claimed' AND lease_end > {{now "$1"}}),
       min(lease_end) FILTER (WHERE state = 'claimed' AND lease_end <= {{now "$1"}}),
       pg_total_relation_size('{{.Table}}')
  FROM {{.Table}}
