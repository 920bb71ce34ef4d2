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
func execLarge[P largeParams](ctx context.Context, db execer, q execQuery[P], a P) (tag pgconn.CommandTag, err error) {
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
	return conn.PgConn().ExecParams(ctx, q.sql, values, a.oids(), formats, nil).Close()
}

// largeParams are the parameters of a large-body statement, which encodes
// them itself: args for pgx (the simple protocol), encode for pgconn, with
// the types oids declares.
type largeParams interface {
	params
	encode() (values [][]byte, formats []int16)
	oids() []uint32
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

func (completeLargeParams) oids() []uint32 { return completeLargeOIDs[:] }

// encode encodes a for pgconn, as completeLargeOIDs declares it: bytea in
// the binary format (the bytes as they are), everything else as text.
func (a completeLargeParams) encode() (values [][]byte, formats []int16) {
	values = append(a.completeParams.encode(), a.body, strconv.AppendBool(nil, a.text))
	return values, []int16{1, 0, 0, 0, 0, 0, 1, 0}
}

// encode encodes p's values for pgconn, as text but the scope (binary).
func (p completeParams) encode() [][]byte {
	var now []byte
	if p.now != nil {
		now = p.now.AppendFormat(nil, time.RFC3339Nano)
	}
	return [][]byte{p.scope, []byte(p.key), strconv.AppendInt(nil, p.generation, 10), []byte(p.result),
		strconv.AppendInt(nil, p.retentionMicros, 10), now}
}

// txCompleteLargeParams are the parameters of sql/tx_complete.sql with
// .Large, $1 to $16: txCompleteParams, then the body and whether it is
// text.
type txCompleteLargeParams struct {
	txCompleteParams
	body []byte
	text bool // jsonb.IsText(body)
}

func (a txCompleteLargeParams) args() []any {
	return append(a.txCompleteParams.args(), a.body, a.text)
}

// txCompleteLargeOIDs are the types execLarge declares for
// txCompleteLargeParams.
var txCompleteLargeOIDs = [16]uint32{oidBytea, oidText, oidInt8, oidText, oidInt8, oidTimestamptz,
	oidText, oidText, oidBool, oidTimestamptz, oidInt8, oidText, oidText, oidText, oidBytea, oidBool}

func (txCompleteLargeParams) oids() []uint32 { return txCompleteLargeOIDs[:] }

func (a txCompleteLargeParams) encode() (values [][]byte, formats []int16) {
	p := a.txCompleteParams
	values = append(p.completeParams.encode(), []byte(p.fingerprint), []byte(p.owner), strconv.AppendBool(nil, p.takeover),
		p.createdAt.AppendFormat(nil, time.RFC3339Nano), strconv.AppendInt(nil, p.takenOver, 10),
		[]byte(p.method), []byte(p.route), []byte(p.caller), a.body, strconv.AppendBool(nil, a.text))
	return values, []int16{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0}
}
