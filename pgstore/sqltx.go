package pgstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// SQLTxFrom returns the transaction a claim was taken in as a [*sql.Tx], for
// work written against database/sql (by hand, or through sqlc's
// database/sql mode, GORM, sqlx, bun), when ctx is the context of work run
// under such a claim (an adapter's InTransaction option, or
// [idem.TxClaim].Context); nil otherwise. It is the transaction [TxFrom]
// returns, on the same connection: rows written through either commit
// together with the claim and its recorded result, or not at all. Every
// call for one claim returns the same *sql.Tx.
//
// The *sql.Tx is not on a *sql.DB of the service's: database/sql cannot
// adopt a transaction already open, so the store drives it itself, with
// pgx, on the claim's connection of its pool. Making it sends nothing, and
// each statement is one round trip, as through TxFrom. Values convert as
// with pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib), whatever
// driver the service's own *sql.DB uses: a service on lib/pq gets pgx's
// conversions, and errors are [*pgconn.PgError], not *pq.Error.
//
// Its Commit and Rollback return [ErrTxOwned] and leave the claim's
// transaction as it is; database/sql counts the *sql.Tx as done after
// either, so the work sends nothing more through it. Savepoints are
// statements (ExecContext "SAVEPOINT s", "ROLLBACK TO SAVEPOINT s").
// Options of BeginTx do not apply: the transaction began with the store's
// Options.TxOptions. Once the claim's owner ends the transaction, every
// call returns [sql.ErrTxDone]; the end waits for a statement in progress.
func SQLTxFrom(ctx context.Context) *sql.Tx {
	v, _ := ctx.Value(txKey{}).(*txView)
	if v == nil {
		return nil
	}
	return v.claim.sqlTx()
}

// claimSQL is the database/sql view of a claim's transaction: a *sql.DB of
// its own, whose one connection is the claim's (sqlConn), and the *sql.Tx
// begun on it, which sends nothing.
type claimSQL struct {
	mu sync.Mutex
	db *sql.DB
	tx *sql.Tx
	// ended is set once the claim's owner ends the transaction: from then
	// on the *sql.Tx's Rollback is the owner's (closeSQL), and succeeds.
	ended atomic.Bool
}

// sqlTx returns the claim's *sql.Tx, made on the first call.
func (c *claimTx) sqlTx() *sql.Tx {
	c.sql.mu.Lock()
	defer c.sql.mu.Unlock()
	if c.sql.tx == nil {
		c.sql.db = sql.OpenDB(sqlConnector{c})
		// Neither the connector nor BeginTx sends anything or fails, and
		// the context never ends: the *sql.Tx lasts until closeSQL.
		var err error
		if c.sql.tx, err = c.sql.db.BeginTx(context.Background(), nil); err != nil {
			panic(fmt.Sprintf("pgstore: beginning the database/sql view of a claim's transaction: %v", err))
		}
		if c.sql.ended.Load() {
			// Asked for after the end: a *sql.Tx already done.
			c.closeSQLLocked()
		}
	}
	return c.sql.tx
}

// closeSQL ends the database/sql view of the transaction, if the work made
// one, before its owner ends the transaction: database/sql waits for a
// statement in progress and closes the work's rows left open, and refuses
// any statement after.
func (c *claimTx) closeSQL() {
	c.sql.mu.Lock()
	defer c.sql.mu.Unlock()
	if c.sql.ended.Swap(true) || c.sql.tx == nil {
		return
	}
	// A statement in progress holds the claim's mu: wait for it here, as
	// the end does (lock), then for database/sql to let go of the *sql.Tx.
	c.lock()
	c.mu.Unlock()
	c.closeSQLLocked()
}

func (c *claimTx) closeSQLLocked() {
	_ = c.sql.tx.Rollback() // sqlTxEnd.Rollback: sends nothing
	_ = c.sql.db.Close()
}

// sqlConnector is the connector of a claim's *sql.DB: its connections are
// the claim's.
type sqlConnector struct{ c *claimTx }

func (k sqlConnector) Connect(context.Context) (driver.Conn, error) { return &sqlConn{k.c}, nil }
func (k sqlConnector) Driver() driver.Driver                        { return sqlDriver{} }

// sqlDriver is the driver of a claim's *sql.DB, which opens nothing by name.
type sqlDriver struct{}

func (sqlDriver) Open(string) (driver.Conn, error) {
	return nil, errors.New("pgstore: the database/sql view of a claim's transaction opens no connection")
}

// sqlConn is the claim's connection as database/sql sees it: its
// statements go through the work's view of the transaction (txView), like
// TxFrom's, and its transaction is the claim's, already open.
type sqlConn struct{ c *claimTx }

var (
	_ driver.Conn               = (*sqlConn)(nil)
	_ driver.ConnBeginTx        = (*sqlConn)(nil)
	_ driver.ConnPrepareContext = (*sqlConn)(nil)
	_ driver.ExecerContext      = (*sqlConn)(nil)
	_ driver.QueryerContext     = (*sqlConn)(nil)
	_ driver.NamedValueChecker  = (*sqlConn)(nil)
)

func (s *sqlConn) Prepare(query string) (driver.Stmt, error) {
	return s.PrepareContext(context.Background(), query)
}

// PrepareContext sends nothing: pgx prepares and caches a statement on its
// first use on the connection.
func (s *sqlConn) PrepareContext(_ context.Context, query string) (driver.Stmt, error) {
	return &sqlStmt{s, query}, nil
}

// Close leaves the connection to the claim.
func (s *sqlConn) Close() error { return nil }

func (s *sqlConn) Begin() (driver.Tx, error) {
	return s.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx sends nothing: the transaction is the claim's, open already.
func (s *sqlConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return sqlTxEnd{s.c}, nil
}

// CheckNamedValue passes every argument to pgx, which takes driver.Valuer
// and sql.Scanner types as well as its own.
func (s *sqlConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (s *sqlConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	tag, err := s.c.view.Exec(ctx, query, argValues(nil, args)...)
	if err != nil {
		return nil, sqlErr(err)
	}
	return driver.RowsAffected(tag.RowsAffected()), nil
}

func (s *sqlConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.c.view.Query(ctx, query, argValues([]any{sqlResultFormats}, args)...)
	if err != nil {
		return nil, sqlErr(err)
	}
	// Read the first row now, so that the columns are known when
	// database/sql asks for them, and an error of the statement is the
	// query's.
	r := &sqlRows{rows: rows, m: s.c.conn.Conn().TypeMap(), first: true}
	r.more = rows.Next()
	if err := rows.Err(); err != nil {
		rows.Close()
		return nil, err
	}
	return r, nil
}

// sqlErr maps the view's error for a transaction its owner ended to
// database/sql's.
func sqlErr(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return sql.ErrTxDone
	}
	return err
}

func argValues(prefix []any, args []driver.NamedValue) []any {
	vs := make([]any, len(prefix), len(prefix)+len(args))
	copy(vs, prefix)
	for _, a := range args {
		vs = append(vs, a.Value)
	}
	return vs
}

// sqlTxEnd is the driver's side of the claim's *sql.Tx: only the claim's
// owner ends the transaction.
type sqlTxEnd struct{ c *claimTx }

// Commit returns ErrTxOwned, sending nothing.
func (t sqlTxEnd) Commit() error { return ErrTxOwned }

// Rollback returns ErrTxOwned, sending nothing; for the owner's own
// (closeSQL), nil.
func (t sqlTxEnd) Rollback() error {
	if t.c.sql.ended.Load() {
		return nil
	}
	return ErrTxOwned
}

// sqlStmt is a statement database/sql prepared: its SQL, which pgx
// prepares (once per connection) when it runs.
type sqlStmt struct {
	conn  *sqlConn
	query string
}

func (s *sqlStmt) Close() error  { return nil }
func (s *sqlStmt) NumInput() int { return -1 }

func (s *sqlStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.New("pgstore: Stmt.Exec without a context is not supported")
}

func (s *sqlStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("pgstore: Stmt.Query without a context is not supported")
}

func (s *sqlStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.conn.ExecContext(ctx, s.query, args)
}

func (s *sqlStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.conn.QueryContext(ctx, s.query, args)
}

// sqlResultFormats asks for the binary format of the types database/sql
// has a Go type for, and text for the others, which it reads as strings
// (as pgx's stdlib driver does).
var sqlResultFormats = pgx.QueryResultFormatsByOID{
	pgtype.BoolOID: pgx.BinaryFormatCode, pgtype.ByteaOID: pgx.BinaryFormatCode, pgtype.CIDOID: pgx.BinaryFormatCode,
	pgtype.DateOID: pgx.BinaryFormatCode, pgtype.Float4OID: pgx.BinaryFormatCode, pgtype.Float8OID: pgx.BinaryFormatCode,
	pgtype.Int2OID: pgx.BinaryFormatCode, pgtype.Int4OID: pgx.BinaryFormatCode, pgtype.Int8OID: pgx.BinaryFormatCode,
	pgtype.OIDOID: pgx.BinaryFormatCode, pgtype.TimestampOID: pgx.BinaryFormatCode,
	pgtype.TimestamptzOID: pgx.BinaryFormatCode, pgtype.XIDOID: pgx.BinaryFormatCode,
}

// sqlRows are a query's rows as database/sql reads them: each value
// converted to a driver.Value.
type sqlRows struct {
	rows   pgx.Rows
	m      *pgtype.Map
	first  bool // the first row was read already (QueryContext)
	more   bool // and there was one
	values []valueFunc
	names  []string
}

var (
	_ driver.RowsColumnTypeDatabaseTypeName = (*sqlRows)(nil)
	_ driver.RowsColumnTypeScanType         = (*sqlRows)(nil)
)

func (r *sqlRows) Columns() []string {
	if r.names == nil {
		fds := r.rows.FieldDescriptions()
		r.names = make([]string, len(fds))
		for i, fd := range fds {
			r.names[i] = fd.Name
		}
	}
	return r.names
}

func (r *sqlRows) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

func (r *sqlRows) Next(dest []driver.Value) error {
	more := r.more
	if r.first {
		r.first = false
	} else {
		more = r.rows.Next()
	}
	if !more {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	if r.values == nil {
		fds := r.rows.FieldDescriptions()
		r.values = make([]valueFunc, len(fds))
		for i, fd := range fds {
			r.values[i] = valueOf(r.m, fd)
		}
	}
	for i, raw := range r.rows.RawValues() {
		if raw == nil {
			dest[i] = nil
			continue
		}
		v, err := r.values[i](raw)
		if err != nil {
			return fmt.Errorf("pgstore: converting column %d: %w", i, err)
		}
		dest[i] = v
	}
	return nil
}

func (r *sqlRows) ColumnTypeDatabaseTypeName(i int) string {
	oid := r.rows.FieldDescriptions()[i].DataTypeOID
	if t, ok := r.m.TypeForOID(oid); ok {
		return strings.ToUpper(t.Name)
	}
	return strconv.FormatUint(uint64(oid), 10)
}

func (r *sqlRows) ColumnTypeScanType(i int) reflect.Type {
	switch r.rows.FieldDescriptions()[i].DataTypeOID {
	case pgtype.BoolOID:
		return reflect.TypeFor[bool]()
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		return reflect.TypeFor[[]byte]()
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return reflect.TypeFor[int64]()
	case pgtype.Float4OID, pgtype.Float8OID:
		return reflect.TypeFor[float64]()
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		return reflect.TypeFor[time.Time]()
	}
	return reflect.TypeFor[string]()
}

// valueFunc converts a column's raw value to the driver.Value database/sql
// reads.
type valueFunc func(raw []byte) (driver.Value, error)

// valueOf returns the conversion of column fd's values: to the Go types of
// driver.Value (int64, float64, bool, []byte, string, time.Time), as pgx's
// stdlib driver converts them.
func valueOf(m *pgtype.Map, fd pgconn.FieldDescription) valueFunc {
	switch fd.DataTypeOID {
	case pgtype.BoolOID:
		return scanTo(m, fd, func(v bool) (driver.Value, error) { return v, nil })
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		return scanTo(m, fd, func(v []byte) (driver.Value, error) { return v, nil })
	case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return scanTo(m, fd, pgtype.Uint32.Value)
	case pgtype.DateOID:
		return scanTo(m, fd, pgtype.Date.Value)
	case pgtype.Float4OID:
		return scanTo(m, fd, func(v float32) (driver.Value, error) { return float64(v), nil })
	case pgtype.Float8OID:
		return scanTo(m, fd, func(v float64) (driver.Value, error) { return v, nil })
	case pgtype.Int2OID:
		return scanTo(m, fd, func(v int16) (driver.Value, error) { return int64(v), nil })
	case pgtype.Int4OID:
		return scanTo(m, fd, func(v int32) (driver.Value, error) { return int64(v), nil })
	case pgtype.Int8OID:
		return scanTo(m, fd, func(v int64) (driver.Value, error) { return v, nil })
	case pgtype.TimestampOID:
		return scanTo(m, fd, pgtype.Timestamp.Value)
	case pgtype.TimestamptzOID:
		return scanTo(m, fd, pgtype.Timestamptz.Value)
	}
	return scanTo(m, fd, func(v string) (driver.Value, error) { return v, nil })
}

// scanTo scans a raw value of column fd into a T, then converts it with
// conv.
func scanTo[T any](m *pgtype.Map, fd pgconn.FieldDescription, conv func(T) (driver.Value, error)) valueFunc {
	var v T
	plan := m.PlanScan(fd.DataTypeOID, fd.Format, &v)
	return func(raw []byte) (driver.Value, error) {
		if err := plan.Scan(raw, &v); err != nil {
			return nil, err
		}
		return conv(v)
	}
}
