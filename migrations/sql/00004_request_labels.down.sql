-- Back to the table without request labels.
ALTER TABLE {{.Table}}
    DROP COLUMN method,
    DROP COLUMN route,
    DROP COLUMN caller;
