// Package pgschema is what package migrations (which creates idem's
// PostgreSQL schema) and package pgstore (which runs statements against it)
// must agree on: the names of the schema's objects, the SQLSTATE of a stale
// claim, the NOTIFY payload naming a key, the statement clock, and the one
// template mechanism that fills them into the embedded .sql files of both
// packages.
//
// # Templates
//
// Every .sql file is a [text/template]. Object names are fields of
// [Objects]: {{.Table}}, {{.Sequence}}, {{.CompleteFunc}}, {{.StaleFunc}}, {{.ChannelSQL}},
// {{.Base}} and {{.StaleState}}; a package may add fields of its own (the
// partitions of a migration, the batch size of a sweep). Two functions
// write the expressions both packages use:
//
//	{{now "$6"}}                   coalesce($6::timestamptz, statement_timestamp())
//	{{payload "scope" "key"}}      the NOTIFY payload of the row's (scope, key)
//
// now is the statement's clock: the parameter (a test clock) when it is not
// null, else statement_timestamp(). payload is [NotifyPayloadSQL], whose Go
// side is [NotifyPayload].
//
// The object names come from [ObjectsFor], which accepts only plain
// lower-case identifiers, so they never need quoting and cannot inject SQL.
package pgschema

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"text/template"
)

// DefaultTable is the claim table when none is configured.
const DefaultTable = "idem_keys"

// StaleClaimSQLState is the SQLSTATE the completion and stale-claim
// functions raise when the generation they are given no longer holds the
// key. pgstore maps it to
// *idem.StaleClaimError.
const StaleClaimSQLState = "IDM01"

// ErrInvalidTable is returned for a table name that is not one or two plain
// lower-case identifiers.
var ErrInvalidTable = errors.New("migrations: invalid table name")

// TableRule says what a valid table name is, for messages.
const TableRule = "want table or schema.table, lower-case letters, digits and underscores, table at most 48 bytes"

// Objects names the database objects the migrations create for one table.
type Objects struct {
	// Table is the claim table as configured, possibly schema-qualified.
	Table string
	// Base is the unqualified table name, the prefix of index names.
	Base string
	// Sequence issues generations.
	Sequence string
	// CompleteFunc is the completion function (see the migrations' SQL).
	CompleteFunc string
	// StaleFunc raises the stale-claim error for a generation that no
	// longer holds its key (migration 3).
	StaleFunc string
	// ChannelSQL is an SQL expression for the LISTEN/NOTIFY channel
	// completions and releases are announced on: "idem_" and the table's
	// oid, so that tables of the same name in different schemas (or
	// databases) never share a channel.
	ChannelSQL string
	// VersionTable is goose's version table for this claim table.
	VersionTable string
	// StaleState is [StaleClaimSQLState].
	StaleState string
}

// The table part leaves room for the longest derived suffix
// ("_goose_version", "_generation_seq", "_expires_at_idx": 15 bytes) within
// PostgreSQL's 63-byte identifiers, so no name is silently truncated.
var (
	schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	tablePattern  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)
)

// ObjectsFor validates table (zero meaning [DefaultTable]) and names the
// objects the migrations create for it.
func ObjectsFor(table string) (Objects, error) {
	if table == "" {
		table = DefaultTable
	}
	schema, base, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, base = "", table
	}
	if (qualified && !schemaPattern.MatchString(schema)) || !tablePattern.MatchString(base) {
		return Objects{}, fmt.Errorf("%w %q: %s", ErrInvalidTable, table, TableRule)
	}
	return Objects{
		Table:        table,
		Base:         base,
		Sequence:     table + "_generation_seq",
		CompleteFunc: table + "_complete",
		StaleFunc:    table + "_stale",
		ChannelSQL:   "'idem_' || '" + table + "'::regclass::oid",
		VersionTable: table + "_goose_version",
		StaleState:   StaleClaimSQLState,
	}, nil
}

// NotifyPayloadSQL is the NOTIFY payload naming a key, over the SQL
// expressions scope (bytea) and key (text): the hex MD5 of scope, a NUL
// byte, and key. It names the key within NOTIFY's payload limit; a key never
// holds a NUL byte, so distinct pairs give distinct inputs, and a hash
// collision would only cause a spurious wake-up. [NotifyPayload] is its Go
// side.
func NotifyPayloadSQL(scope, key string) string {
	return "md5(" + scope + ` || '\x00'::bytea || convert_to(` + key + ", 'UTF8'))"
}

// NotifyPayload is [NotifyPayloadSQL] computed in Go, for the listener to
// match notifications with keys.
func NotifyPayload(scope, key string) string {
	p := NotifyPayloadBytes(scope, key)
	return string(p[:])
}

// NotifyPayloadBytes is [NotifyPayload] as bytes. It runs on every claim
// the replay cache misses, so it allocates nothing: the input on the
// stack when it fits, and the result an array, which a claim turns into a
// string only if it caches a result.
func NotifyPayloadBytes(scope, key string) (payload [2 * md5.Size]byte) {
	var stack [256]byte
	in := append(append(append(stack[:0], scope...), 0), key...)
	sum := md5.Sum(in)
	hex.Encode(payload[:], sum[:])
	return payload
}

// NowSQL is the statement clock over the nullable timestamptz expression
// param: param when not null (a test clock), else statement_timestamp().
func NowSQL(param string) string {
	return "coalesce(" + param + "::timestamptz, statement_timestamp())"
}

var funcs = template.FuncMap{"now": NowSQL, "payload": NotifyPayloadSQL}

// Parse parses the file name of fsys as a template with the functions of
// the package documentation. Executing it with a struct that lacks a field
// the file names is an error.
func Parse(fsys fs.FS, name string) (*template.Template, error) {
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	return parse(name, string(src))
}

// ParseStatement is [Parse] for a file holding one statement after its
// documentation, the comment lines it starts with. The documentation is for
// the reader of the file: it is left out of the template, so it is neither
// rendered nor sent with every query.
func ParseStatement(fsys fs.FS, name string) (*template.Template, error) {
	src, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	rest := string(src)
	for strings.HasPrefix(rest, "--") {
		_, rest, _ = strings.Cut(rest, "\n")
	}
	return parse(name, rest)
}

func parse(name, src string) (*template.Template, error) {
	return template.New(name).Funcs(funcs).Option("missingkey=error").Parse(src)
}

// Execute renders t with data.
func Execute(t *template.Template, data any) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Render parses the file name of fsys and renders it with data.
func Render(fsys fs.FS, name string, data any) (string, error) {
	t, err := Parse(fsys, name)
	if err != nil {
		return "", err
	}
	return Execute(t, data)
}
