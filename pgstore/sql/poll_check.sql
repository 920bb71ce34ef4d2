-- A polling Wait's look at the key (no LISTEN in effect, or
-- NoListen): the same, without the mark, since nobody will hear a
-- notification for it.
SELECT {{.ChannelSQL}}, CASE WHEN state = 'claimed' AND lease_end > {{now "$3"}}
                  THEN (extract(epoch FROM lease_end - {{now "$3"}}) * 1000000)::bigint END
  FROM {{.Table}} WHERE scope = $1 AND key = $2
