package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem"
)

// Every statement of sql/ is bound to Go types: its parameters are a struct
// whose args method lists them in order, $1 first, and the row it returns
// (if it is read) is a struct whose targets method lists the scan targets of
// its columns in order. The field of statements holding the SQL is a
// rowQuery, rowsQuery or execQuery over those two types, so the only way to
// send the statement is with its parameters, and the only way to read its
// answer is into its row. The binding of every file is in queries.go; the
// statements are rendered in sql.go; TestStatementsMatchTheirTypes checks
// each file's placeholders and columns against its types, in PostgreSQL.

// params are a statement's parameters: args lists them, $1 first.
type params interface{ args() []any }

// row is a pointer to a statement's row: targets lists the scan targets of
// its columns in order (nil for a column that is not read).
type row[R any] interface {
	*R
	targets() []any
}

// querier is what sends a statement that returns one row: the pool, a
// caller's transaction, or the connection of a claim's transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// rowsQuerier is what sends a statement that returns rows.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// execer is what sends a statement whose rows are not read.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// rowQuery is a statement that returns one row, with parameters P and row
// R (through its pointer type PR).
type rowQuery[P params, R any, PR row[R]] struct{ sql string }

// query sends the statement with p and reads its row; pgx.ErrNoRows when
// it returned none.
func (q rowQuery[P, R, PR]) query(ctx context.Context, db querier, p P) (R, error) {
	return q.scan(db.QueryRow(ctx, q.sql, p.args()...))
}

// queue adds the statement with p to a batch, whose row scan then reads.
func (q rowQuery[P, R, PR]) queue(b *pgx.Batch, p P) { b.Queue(q.sql, p.args()...) }

// scan reads the statement's row from r.
func (q rowQuery[P, R, PR]) scan(r pgx.Row) (R, error) {
	var res R
	err := r.Scan(PR(&res).targets()...)
	return res, err
}

// rowsQuery is a statement that returns any number of rows.
type rowsQuery[P params, R any, PR row[R]] struct{ sql string }

// query sends the statement with p and reads all its rows.
func (q rowsQuery[P, R, PR]) query(ctx context.Context, db rowsQuerier, p P) ([]R, error) {
	rows, err := db.Query(ctx, q.sql, p.args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var all []R
	for rows.Next() {
		var r R
		if err := rows.Scan(PR(&r).targets()...); err != nil {
			return nil, err
		}
		all = append(all, r)
	}
	return all, rows.Err()
}

// execQuery is a statement whose rows, if it returns any, are not read:
// its command tag says what it did.
type execQuery[P params] struct{ sql string }

// exec sends the statement with p.
func (q execQuery[P]) exec(ctx context.Context, db execer, p P) (pgconn.CommandTag, error) {
	return db.Exec(ctx, q.sql, p.args()...)
}

// execUnprepared sends the statement with p without preparing it, in any
// query exec mode: for a rare statement that pgx would otherwise prepare
// again after each error it raises (an extra round trip).
func (q execQuery[P]) execUnprepared(ctx context.Context, db execer, p P) (pgconn.CommandTag, error) {
	return db.Exec(ctx, q.sql, append([]any{pgx.QueryExecModeExec}, p.args()...)...)
}

// queue adds the statement with p to a batch.
func (q execQuery[P]) queue(b *pgx.Batch, p P) { b.Queue(q.sql, p.args()...) }

// statement is what the registry (sql.go) and its tests see of a bound
// statement: its SQL, and the Go values it is bound to.
type statement interface {
	setSQL(sql string)
	text() string
	// binding returns the arguments of zero parameters and the scan
	// targets of a zero row (none for an execQuery), whose types the
	// tests compare with PostgreSQL's description of the statement.
	binding() (args, targets []any)
}

func (q *rowQuery[P, R, PR]) setSQL(sql string)  { q.sql = sql }
func (q *rowsQuery[P, R, PR]) setSQL(sql string) { q.sql = sql }
func (q *execQuery[P]) setSQL(sql string)        { q.sql = sql }
func (q *rowQuery[P, R, PR]) text() string       { return q.sql }
func (q *rowsQuery[P, R, PR]) text() string      { return q.sql }
func (q *execQuery[P]) text() string             { return q.sql }

func (q *rowQuery[P, R, PR]) binding() (args, targets []any) {
	var p P
	return p.args(), PR(new(R)).targets()
}

func (q *rowsQuery[P, R, PR]) binding() (args, targets []any) {
	var p P
	return p.args(), PR(new(R)).targets()
}

func (q *execQuery[P]) binding() (args, targets []any) {
	var p P
	return p.args(), nil
}

// resultColumn is a scan target for the result column (jsonb, null until
// completed) that decodes the JSON as pgx hands it over, from pgx's read
// buffer: a []byte target would copy it first, and a large body would be
// held once more. The decoding error is kept, not returned, so that a
// result that cannot be decoded fails only the operation that uses it
// (a claim takes an expired row over whatever it holds).
type resultColumn struct {
	res   idem.Result
	valid bool // not null
	err   error
}

var _ pgtype.BytesScanner = (*resultColumn)(nil)

// ScanBytes implements [pgtype.BytesScanner]; b is valid only during the
// call, and the decoded result keeps none of it.
func (c *resultColumn) ScanBytes(b []byte) error {
	*c = resultColumn{valid: b != nil}
	if c.valid {
		c.err = c.res.UnmarshalJSON(b)
	}
	return nil
}

// result returns the decoded result; a null column is an error.
func (c *resultColumn) result() (idem.Result, error) {
	switch {
	case !c.valid:
		return idem.Result{}, errors.New("completed without a result")
	case c.err != nil:
		return idem.Result{}, c.err
	}
	return c.res, nil
}

func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
