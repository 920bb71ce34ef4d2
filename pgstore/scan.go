package pgstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem"
)

// Every statement of sql/ is bound to Go types: its parameters are a struct
// whose args method lists them in order, $1 first, and the row it returns
// (if it is read) is a struct whose appendTargets method lists the scan
// targets of its columns in order. The field of statements holding the SQL
// is a rowQuery, rowsQuery or execQuery over those two types, so the only way to
// send the statement is with its parameters, and the only way to read its
// answer is into its row. The binding of every file is in queries.go; the
// statements are rendered in sql.go; TestStatementsMatchTheirTypes checks
// each file's placeholders and columns against its types, in PostgreSQL.

// params are a statement's parameters: args lists them, $1 first.
type params interface{ args() []any }

// row is a pointer to a statement's row: appendTargets appends to dst the
// scan targets of its columns in order (nil for a column that is not
// read).
type row[R any] interface {
	*R
	appendTargets(dst []any) []any
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
	err := q.scanInto(r, PR(&res), nil)
	return res, err
}

// scanInto reads the statement's row from r into *res, listing its scan
// targets in targets[:0]. A caller that reads a row for every request
// holds both in a struct of its own: scan's row and the list of its
// targets, which pgx's Scan takes, are an allocation each.
func (q rowQuery[P, R, PR]) scanInto(r pgx.Row, res PR, targets []any) error {
	var zero R
	*res = zero
	if rs, ok := any(res).(pgx.RowScanner); ok {
		// A row that decodes itself (rowdecode.go), alone in the list.
		return r.Scan(append(targets[:0], rs)...)
	}
	return r.Scan(res.appendTargets(targets[:0])...)
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
	var (
		all     []R
		targets []any
	)
	for rows.Next() {
		var r R
		targets = PR(&r).appendTargets(targets[:0])
		if err := rows.Scan(targets...); err != nil {
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

// heldBatch is a pgx.Batch of up to four statements whose queued queries
// and arguments live in it, for the round trips of a claim in a
// transaction (BeginClaim's and its Commit's), sent for every request:
// queueing a statement allocates neither its QueuedQuery, nor a longer
// slice of them, nor its arguments (heldParams). It is reset before each
// batch it sends: pgx keeps in a QueuedQuery the statement description it
// sent the query with.
type heldBatch struct {
	pgx.Batch
	queued [4]pgx.QueuedQuery
	slots  [4]*pgx.QueuedQuery
	args   [16]any
	nargs  int
}

// reset empties b for the next batch (BeginTx, if it begins a
// transaction, comes next, before anything is queued).
func (b *heldBatch) reset() {
	b.Batch = pgx.Batch{QueuedQueries: b.slots[:0]}
	b.nargs = 0
}

// add queues sql, with the arguments p holds (none if p is nil), in b's
// next slot.
func (b *heldBatch) add(sql string, p heldParams) {
	args := b.args[b.nargs:b.nargs:len(b.args)]
	if p != nil {
		args = p.heldArgs(args)
	}
	b.nargs += len(args)
	i := len(b.QueuedQueries)
	b.queued[i] = pgx.QueuedQuery{SQL: sql, Arguments: args}
	b.QueuedQueries = append(b.QueuedQueries, &b.queued[i])
}

// heldParams are the parameters of a statement sent through a heldBatch,
// held as long as the batch (in the claim's transaction): heldArgs appends
// to dst the arguments args lists, in the same order, but for a string, a
// []byte or an int64 a pointer to it, as a textArg, bytesArg or int8Arg
// (TestHeldArgsAreArgs checks that the two lists agree).
type heldParams interface{ heldArgs(dst []any) []any }

// queueHeld adds q, with the parameters p points to, to b.
func queueHeld[P params, PP interface {
	*P
	heldParams
}](b *heldBatch, q execQuery[P], p PP) {
	b.add(q.sql, p)
}

// queueHeldRow adds q, with the parameters p points to, to b; its row is
// read with scanInto.
func queueHeldRow[P params, R any, PR row[R], PP interface {
	*P
	heldParams
}](b *heldBatch, q rowQuery[P, R, PR], p PP) {
	b.add(q.sql, p)
}

// textArg, bytesArg and int8Arg are text, bytea and bigint arguments that
// a statement's arguments hold by pointer (heldParams): a string, a
// []byte or an int64 (from 256) put in an interface is copied to the heap,
// a pointer is not. pgx encodes each through the interface of pgtype it
// implements (TextValuer, BytesValuer, Int64Valuer), without a copy; where
// the parameter's type is not known (the exec and simple protocol modes
// without a prepared statement), through its underlying type, as it
// encodes a string, a []byte or an int64.
type (
	textArg  string
	bytesArg []byte
	int8Arg  int64
)

func (a *textArg) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*a), Valid: true}, nil
}

func (a *bytesArg) BytesValue() ([]byte, error) { return *a, nil }

func (a *int8Arg) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*a), Valid: true}, nil
}

// String makes a tracer that prints a statement's arguments print the
// text, not the pointer.
func (a *textArg) String() string { return string(*a) }

// String makes a tracer that prints a statement's arguments print the
// number, not the pointer.
func (a *int8Arg) String() string { return strconv.FormatInt(int64(*a), 10) }

var (
	_ pgtype.TextValuer  = (*textArg)(nil)
	_ pgtype.BytesValuer = (*bytesArg)(nil)
	_ pgtype.Int64Valuer = (*int8Arg)(nil)
)

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
	return p.args(), PR(new(R)).appendTargets(nil)
}

func (q *rowsQuery[P, R, PR]) binding() (args, targets []any) {
	var p P
	return p.args(), PR(new(R)).appendTargets(nil)
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

// int8Column is a scan target for a nullable bigint column of a row read
// for every request (the generation a claim draws): into a *int64, pgx
// would allocate the int64.
type int8Column struct {
	v     int64
	valid bool // not null
}

var _ pgtype.Int64Scanner = (*int8Column)(nil)

// ScanInt64 implements [pgtype.Int64Scanner].
func (c *int8Column) ScanInt64(v pgtype.Int8) error {
	c.v, c.valid = v.Int64, v.Valid
	return nil
}

func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
