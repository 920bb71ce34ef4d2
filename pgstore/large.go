package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// largeBody is the body size from which Complete sends the body as its own
// parameter, encoded by execLarge, with the JSON built around it in SQL
// (sql/complete.sql rendered with .Large); below it, Complete sends the result's JSON,
// built in Go, through pgx (sql/complete.sql).
const largeBody = 64 << 10

// execLarge runs the large-body completion statement with args (as Complete builds them)
// on db's connection through pgconn, with the parameters encoded here: the
// body, which may be megabytes, is handed to the wire protocol's buffer as
// it is. Through pgx it would be copied twice (into the encoded parameters,
// then into the Bind message), so a recorded response would be held three
// times at once; here twice (the caller's and the message's). The statement
// is the unnamed one (parse, bind, execute: still one round trip), and the
// connection's tracer sees it as a query as usual. A connection set to the
// simple protocol (which never sends typed parameters) gets the statement
// through pgx instead.
func execLarge(ctx context.Context, db execer, sql string, a completeArgs) (tag pgconn.CommandTag, err error) {
	var conn *pgx.Conn
	switch d := db.(type) {
	case *pgxpool.Pool:
		c, err := d.Acquire(ctx)
		if err != nil {
			return tag, err
		}
		defer c.Release()
		conn = c.Conn()
	case pgx.Tx:
		conn = d.Conn()
	default:
		return tag, fmt.Errorf("pgstore: no connection behind %T", db)
	}
	if conn.Config().DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		return conn.Exec(ctx, sql, a.list()...)
	}
	values, oids, formats := a.params()
	if tr := conn.Config().Tracer; tr != nil {
		ctx = tr.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: sql, Args: a.list()})
		defer func() { tr.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err}) }()
	}
	return conn.PgConn().ExecParams(ctx, sql, values, oids, formats, nil).Close()
}

// PostgreSQL type oids of the complete statement's parameters.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidText        = 25
	oidTimestamptz = 1184
)

// completeArgs are the large-body completion statement's parameters, $1 to $8.
type completeArgs struct {
	scope     []byte
	key       string
	gen       int64
	meta      string // the result without its body, JSON
	retention int64  // microseconds, negative: forever
	now       any    // nil or time.Time
	body      []byte
	text      bool // idem.IsText(body)
}

func (a completeArgs) list() []any {
	return []any{a.scope, a.key, a.gen, a.meta, a.retention, a.now, a.body, a.text}
}

// params encodes a for pgconn: bytea in the binary format (the bytes as
// they are), everything else as text.
func (a completeArgs) params() (values [][]byte, oids []uint32, formats []int16) {
	var now []byte
	if t, ok := a.now.(time.Time); ok {
		now = t.AppendFormat(nil, time.RFC3339Nano)
	}
	values = [][]byte{a.scope, []byte(a.key), strconv.AppendInt(nil, a.gen, 10), []byte(a.meta),
		strconv.AppendInt(nil, a.retention, 10), now, a.body, strconv.AppendBool(nil, a.text)}
	oids = []uint32{oidBytea, oidText, oidInt8, oidText, oidInt8, oidTimestamptz, oidBytea, oidBool}
	formats = []int16{1, 0, 0, 0, 0, 0, 1, 0}
	return values, oids, formats
}
