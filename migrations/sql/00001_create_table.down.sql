DROP FUNCTION {{.CompleteFunc}}(bytea, text, bigint, jsonb, bigint, timestamptz);
DROP TABLE {{.Table}};
DROP SEQUENCE {{.Sequence}};
