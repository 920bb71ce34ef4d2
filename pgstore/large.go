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
func execLarge(ctx context.Context, db execer, q execQuery[completeLargeParams], a completeLargeParams) (tag pgconn.CommandTag, err error) {
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
		return q.exec(ctx, conn, a)
	}
	values, formats := a.encode()
	if tr := conn.Config().Tracer; tr != nil {
		ctx = tr.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: q.sql, Args: a.args()})
		defer func() { tr.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{CommandTag: tag, Err: err}) }()
	}
	return conn.PgConn().ExecParams(ctx, q.sql, values, completeLargeOIDs[:], formats, nil).Close()
}

// PostgreSQL type oids of the large-body completion's parameters.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidText        = 25
	oidTimestamptz = 1184
)

// completeLargeParams are the large-body completion statement's parameters
// (sql/complete.sql with .Large), $1 to $8: sql/complete.sql's, then the
// body and whether it is text. result is the result without its body.
type completeLargeParams struct {
	completeParams
	body []byte
	text bool // jsonb.IsText(body)
}

func (a completeLargeParams) args() []any { return append(a.completeParams.args(), a.body, a.text) }

// completeLargeOIDs are the types execLarge declares for
// completeLargeParams, $1 to $8.
var completeLargeOIDs = [8]uint32{oidBytea, oidText, oidInt8, oidText, oidInt8, oidTimestamptz, oidBytea, oidBool}

// encode encodes a for pgconn, as completeLargeOIDs declares it: bytea in
// the binary format (the bytes as they are), everything else as text.
func (a completeLargeParams) encode() (values [][]byte, formats []int16) {
	var now []byte
	if a.now != nil {
		now = a.now.AppendFormat(nil, time.RFC3339Nano)
	}
	values = [][]byte{a.scope, []byte(a.key), strconv.AppendInt(nil, a.generation, 10), []byte(a.result),
		strconv.AppendInt(nil, a.retentionMicros, 10), now, a.body, strconv.AppendBool(nil, a.text)}
	formats = []int16{1, 0, 0, 0, 0, 0, 1, 0}
	return values, formats
}
