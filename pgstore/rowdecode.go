package pgstore

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The rows a claim in a transaction reads for every request (txLockRow,
// txClaimRow) decode themselves ([pgx.RowScanner]): pgx plans the scan of
// every column again for every row, and the plans of timestamps, of
// nullable columns and of JSON allocate, as do the lists of a row's plans
// (thirteen allocations for the look's row). A column that comes as pgx
// asks for it in its extended protocol modes (bool, bigint and
// timestamptz in binary; text and jsonb in either format) is decoded here,
// as pgx decodes it; any other row (the simple protocol's text, a
// timestamp pgx would place in a location of the caller's, an infinite
// one) is scanned through pgx, as any row. TestRowsDecodeAsPgxScans
// compares the two.

// ScanRow implements [pgx.RowScanner].
func (r *txLockRow) ScanRow(rows pgx.Rows) error {
	fields, values := rows.FieldDescriptions(), rows.RawValues()
	if len(fields) == 1 && len(values) == 1 && decodeBool(fields[0], values[0], &r.waited) {
		return nil
	}
	*r = txLockRow{}
	return rows.Scan(&r.waited)
}

// ScanRow implements [pgx.RowScanner].
func (r *txClaimRow) ScanRow(rows pgx.Rows) error {
	if r.decode(rows.Conn(), rows.FieldDescriptions(), rows.RawValues()) {
		return nil
	}
	*r = txClaimRow{}
	var targets [12]any
	return rows.Scan(r.appendTargets(targets[:0])...)
}

// decode decodes the row's columns, in appendTargets's order, and reports
// whether it could.
func (r *txClaimRow) decode(conn *pgx.Conn, f []pgconn.FieldDescription, v [][]byte) bool {
	if len(f) != 12 || len(v) != 12 || !defaultTimestamptz(conn) {
		return false
	}
	c := &r.claimRow
	return decodeBool(f[0], v[0], &c.inserted) && decodeBool(f[1], v[1], &c.held) &&
		decodeInt8(f[2], v[2], &c.generation) && decodeNullTime(f[3], v[3], &c.leaseEnd) &&
		decodeText(f[4], v[4], &c.state) && decodeText(f[5], v[5], &c.fingerprint) &&
		decodeNullTime(f[6], v[6], &c.expiresAt) && decodeJSON(f[7], v[7], &c.result) &&
		decodeTime(f[8], v[8], &c.now) && decodeNullInt8(f[9], v[9], &r.next) &&
		decodeInt8(f[10], v[10], &r.statementTimeoutMillis) && decodeBool(f[11], v[11], &r.sessions)
}

// defaultTimestamptz reports whether conn decodes timestamptz as pgx does
// by default: in the local time zone.
func defaultTimestamptz(conn *pgx.Conn) bool {
	if conn == nil {
		return false
	}
	t, ok := conn.TypeMap().TypeForOID(pgtype.TimestamptzOID)
	if !ok {
		return false
	}
	codec, ok := t.Codec.(*pgtype.TimestamptzCodec)
	return ok && codec.ScanLocation == nil
}

func decodeBool(f pgconn.FieldDescription, v []byte, dst *bool) bool {
	if f.DataTypeOID != pgtype.BoolOID || f.Format != pgtype.BinaryFormatCode || len(v) != 1 {
		return false
	}
	*dst = v[0] == 1
	return true
}

func decodeInt8(f pgconn.FieldDescription, v []byte, dst *int64) bool {
	if f.DataTypeOID != pgtype.Int8OID || f.Format != pgtype.BinaryFormatCode || len(v) != 8 {
		return false
	}
	*dst = int64(binary.BigEndian.Uint64(v))
	return true
}

func decodeNullInt8(f pgconn.FieldDescription, v []byte, dst *int8Column) bool {
	if v == nil {
		*dst = int8Column{}
		return f.DataTypeOID == pgtype.Int8OID
	}
	dst.valid = true
	return decodeInt8(f, v, &dst.v)
}

// decodeTime decodes a binary timestamptz as pgx's TimestamptzCodec does,
// but infinity, which pgx refuses to scan into a time.Time.
func decodeTime(f pgconn.FieldDescription, v []byte, dst *time.Time) bool {
	if f.DataTypeOID != pgtype.TimestamptzOID || f.Format != pgtype.BinaryFormatCode || len(v) != 8 {
		return false
	}
	const unixToY2K = 946_684_800 // seconds from 1970-01-01 to 2000-01-01
	us := int64(binary.BigEndian.Uint64(v))
	if us == math.MaxInt64 || us == math.MinInt64 {
		return false
	}
	*dst = time.Unix(unixToY2K+us/1_000_000, us%1_000_000*1_000)
	return true
}

func decodeNullTime(f pgconn.FieldDescription, v []byte, dst **time.Time) bool {
	if v == nil {
		*dst = nil
		return f.DataTypeOID == pgtype.TimestamptzOID
	}
	var t time.Time
	if !decodeTime(f, v, &t) {
		return false
	}
	*dst = &t
	return true
}

func decodeText(f pgconn.FieldDescription, v []byte, dst *string) bool {
	if f.DataTypeOID != pgtype.TextOID || v == nil {
		return false
	}
	*dst = string(v)
	return true
}

// decodeJSON hands a jsonb column to dst as pgx does: binary jsonb is its
// text after a version byte of 1.
func decodeJSON(f pgconn.FieldDescription, v []byte, dst *resultColumn) bool {
	if f.DataTypeOID != pgtype.JSONBOID {
		return false
	}
	if v != nil && f.Format == pgtype.BinaryFormatCode {
		if len(v) == 0 || v[0] != 1 {
			return false
		}
		v = v[1:]
	}
	return dst.ScanBytes(v) == nil
}

var (
	_ pgx.RowScanner = (*txLockRow)(nil)
	_ pgx.RowScanner = (*txClaimRow)(nil)
)
