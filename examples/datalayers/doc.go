// Package datalayers shows idem's one-commit path (InTransaction) with the
// data layers Go services on PostgreSQL use. A handler under
// middleware.Options.InTransaction writes its invoice through the layer in
// the claim's transaction: invoice, claim and recorded response commit
// together or not at all; what a layer writes through a connection of its
// own (the service's pool, a *sql.DB or *gorm.DB opened on it) is outside
// the claim. Each layer gets the claim's transaction as:
//
//   - pgx: pgstore.TxFrom(ctx), a pgx.Tx; every statement (Exec, Query,
//     batches, CopyFrom), savepoints with Begin.
//   - sqlc: queries.WithTx(pgstore.TxFrom(ctx)) in pgx/v5 mode,
//     queries.WithTx(pgstore.SQLTxFrom(ctx)) in database/sql mode.
//   - database/sql, any driver: pgstore.SQLTxFrom(ctx), a *sql.Tx;
//     savepoints as statements (SAVEPOINT s, ROLLBACK TO SAVEPOINT s).
//   - GORM (gorm.io/driver/postgres):
//     gorm.Open(postgres.New(postgres.Config{Conn: pgstore.SQLTxFrom(ctx)}),
//     &gorm.Config{SkipDefaultTransaction: true}), a *gorm.DB with no
//     connection of its own; nested Transaction calls become savepoints.
//   - sqlx: &sqlx.Tx{Tx: pgstore.SQLTxFrom(ctx), Mapper: db.Mapper}; it has
//     no driver name, so bind named queries with sqlx.BindNamed(sqlx.DOLLAR, …).
//   - bun: a query's Conn(pgstore.SQLTxFrom(ctx)) (a *sql.Tx is a
//     bun.IConn); the *bun.DB gives only the dialect.
//   - ent: not shown and untested: its driver can be made over the *sql.Tx
//     (entsql.NewDriver(dialect.Postgres, entsql.Conn{ExecQuerier: tx})), but
//     a client needs ent's generated code.
//
// A module of its own, keeping the layers' dependencies out of idem's. The
// tests (datalayers_test.go) run each layer but ent against PostgreSQL: a
// retry replayed, a failure after the insert leaving nothing, and 20
// concurrent duplicates leaving one row. The sqlc code in sqlc/ is generated
// by sqlc v1.31.0 from schema.sql and query.sql as sqlc.yaml says (`sqlc
// generate` here). sqlc's module has replace directives, so `go install` and
// `go run` of it at a version refuse; build it in its module's directory:
//
//	cd "$(go mod download -json github.com/sqlc-dev/sqlc@v1.31.0 | jq -r .Dir)" && go build -o /tmp/sqlc ./cmd/sqlc
package datalayers
