package pgstore_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/pgstore"
)

// statements returns every statement of sql/ as a store on idem_keys
// renders it.
func statements(t *testing.T) []pgstore.Statement {
	t.Helper()
	all, err := pgstore.Statements("")
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func statementName(s pgstore.Statement) string {
	if s.Variant == "" {
		return "sql/" + s.File + ".sql"
	}
	return "sql/" + s.File + ".sql " + s.Variant
}

// TestEverySQLFileIsRegistered: every file of sql/ is rendered into a
// statement the store sends (a file missing from the registry would be
// dead SQL, or SQL that someone believes runs), and none is empty.
func TestEverySQLFileIsRegistered(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".sql"); ok {
			files = append(files, name)
		}
	}
	if len(files) == 0 {
		t.Fatal("no file in sql/")
	}
	registered := map[string]bool{}
	for _, s := range statements(t) {
		registered[s.File] = true
		if strings.TrimSpace(s.SQL) == "" {
			t.Errorf("%s renders to nothing", statementName(s))
		}
	}
	for _, f := range files {
		if !registered[f] {
			t.Errorf("sql/%s.sql is not registered (statements.files in sql.go)", f)
		}
	}
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// TestPlaceholdersMatchParams: the placeholders of every statement are
// exactly $1 to $n, where n is the number of arguments its parameters
// type sends. A placeholder without an argument fails at run time (or
// worse, binds a neighbour's); an argument without a placeholder is an
// error in PostgreSQL only when it is the last one.
func TestPlaceholdersMatchParams(t *testing.T) {
	t.Parallel()
	for _, s := range statements(t) {
		used := map[int]bool{}
		for _, line := range strings.Split(s.SQL, "\n") {
			line, _, _ = strings.Cut(line, "--") // no statement has "--" in a literal
			for _, m := range placeholder.FindAllStringSubmatch(line, -1) {
				n, _ := strconv.Atoi(m[1])
				used[n] = true
			}
		}
		for n := range used {
			if n < 1 || n > len(s.Args) {
				t.Errorf("%s uses $%d, but its parameters are %d", statementName(s), n, len(s.Args))
			}
		}
		for n := 1; n <= len(s.Args); n++ {
			if !used[n] {
				t.Errorf("%s has %d parameters, but does not use $%d", statementName(s), len(s.Args), n)
			}
		}
	}
}

// TestStatementsMatchTheirTypes asks PostgreSQL to describe every
// statement on a migrated table, and compares its parameters and columns
// with the Go types the statement is bound to (pgstore's queries.go): the
// number and types of the parameters with its params type's arguments, and
// of the columns with its row type's scan targets. A statement whose rows
// are not read is checked for its parameters only. A column added to a
// statement and not to its row, or a parameter reordered, fails here, not
// in production.
func TestStatementsMatchTheirTypes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := migrated(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, s := range statements(t) {
		name := statementName(s)
		// The unnamed statement: described, never executed. With the
		// parameter types its sender declares, if it declares them.
		desc, err := conn.Conn().PgConn().Prepare(ctx, "", s.SQL, s.OIDs)
		if err != nil {
			t.Errorf("%s: PostgreSQL does not take it: %v", name, err)
			continue
		}
		if len(desc.ParamOIDs) != len(s.Args) {
			t.Errorf("%s: PostgreSQL sees %d parameters, its parameters type has %d", name, len(desc.ParamOIDs), len(s.Args))
		} else {
			for i, a := range s.Args {
				want, ok := oidOf(reflect.TypeOf(a))
				if reflect.TypeOf(a).Kind() == reflect.String {
					// A string is sent as text, which PostgreSQL
					// converts to the jsonb the statement casts it to.
					want = append(want, oidJSONB)
				}
				if !ok {
					t.Errorf("%s: $%d is a %T, which the test does not know", name, i+1, a)
				} else if !slices.Contains(want, desc.ParamOIDs[i]) {
					t.Errorf("%s: $%d is of type oid %d in PostgreSQL, its argument a %T (oids %v)", name, i+1, desc.ParamOIDs[i], a, want)
				}
			}
		}
		if s.OIDs != nil && !slices.Equal(s.OIDs, desc.ParamOIDs) {
			t.Errorf("%s: sent with parameter types %v, PostgreSQL described %v", name, s.OIDs, desc.ParamOIDs)
		}
		if s.Targets == nil {
			continue
		}
		if len(desc.Fields) != len(s.Targets) {
			t.Errorf("%s: PostgreSQL returns %d columns, its row type scans %d", name, len(desc.Fields), len(s.Targets))
			continue
		}
		for i, target := range s.Targets {
			if target == nil {
				continue // a column that is not read
			}
			f := desc.Fields[i]
			if want, ok := oidOf(reflect.TypeOf(target).Elem()); !ok {
				t.Errorf("%s: column %d (%s) is scanned into a %T, which the test does not know", name, i+1, f.Name, target)
			} else if !slices.Contains(want, f.DataTypeOID) {
				t.Errorf("%s: column %d (%s) is of type oid %d, scanned into a %T (oids %v)", name, i+1, f.Name, f.DataTypeOID, target, want)
			}
		}
	}
}

// PostgreSQL type oids.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidText        = 25
	oidTimestamptz = 1184
	oidJSONB       = 3802
)

// oidOf returns the PostgreSQL types a Go value of type t stands for in
// pgstore's statements, a pointer standing for the nullable type it points
// to.
func oidOf(t reflect.Type) ([]uint32, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return []uint32{oidTimestamptz}, true
	case t == reflect.TypeFor[[]byte]():
		return []uint32{oidBytea}, true
	case t.Name() == "resultColumn":
		return []uint32{oidJSONB}, true
	case t.Name() == "int8Column":
		return []uint32{oidInt8}, true
	}
	switch t.Kind() {
	case reflect.Bool:
		return []uint32{oidBool}, true
	case reflect.Int, reflect.Int64:
		return []uint32{oidInt8}, true
	case reflect.String:
		return []uint32{oidText}, true
	}
	return nil, false
}
