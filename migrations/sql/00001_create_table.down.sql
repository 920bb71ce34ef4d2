DROP FUNCTION {{.CompleteFunc}}(text, text, bigint, jsonb, bigint, timestamptz);
DROP TABLE {{.Table}};
DROP SEQUENCE {{.Sequence}};
