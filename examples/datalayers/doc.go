// Package datalayers shows idem's one-commit path (InTransaction) with the
// data layers Go services on PostgreSQL use: sqlc in both of its modes
// (pgx/v5 and database/sql), GORM, sqlx and bun. In each, a handler under
// middleware.Options.InTransaction writes its invoice through the layer
// inside the claim's transaction, which it gets from pgstore.TxFrom (a
// pgx.Tx) or pgstore.SQLTxFrom (a *sql.Tx): the invoice, the claim and the
// recorded response commit together or not at all.
//
// It is a module of its own, so that the layers' dependencies stay out of
// idem's. The tests (datalayers_test.go) run each layer against
// PostgreSQL: a retry replayed, a failure after the insert leaving
// nothing, and 20 concurrent duplicates leaving one row. The sqlc code in
// sqlc/ is generated from schema.sql and query.sql as sqlc.yaml says, by
// sqlc v1.31.0 (`sqlc generate` here). Its module has replace directives,
// so `go install` and `go run` of it at a version refuse; build it in its
// own module's directory:
//
//	cd "$(go mod download -json github.com/sqlc-dev/sqlc@v1.31.0 | jq -r .Dir)" && go build -o /tmp/sqlc ./cmd/sqlc
package datalayers
