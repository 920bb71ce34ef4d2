package migrations_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/migrations"
)

// FuzzObjectsFor checks that every table name ObjectsFor accepts is safe to
// paste into SQL unquoted, and that no derived name exceeds PostgreSQL's
// 63-byte identifiers (which would be truncated silently).
func FuzzObjectsFor(f *testing.F) {
	for _, s := range []string{"", "idem_keys", "ops.idem_keys", "a.b.c", "X", `a"b`, "a;b", "a\x00", "é", strings.Repeat("a", 48), strings.Repeat("a", 49)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, table string) {
		o, err := migrations.ObjectsFor(table)
		if err != nil {
			return
		}
		for _, name := range []string{o.Table, o.Sequence, o.CompleteFunc, o.VersionTable, o.Base + "_lease_end_idx", o.Base + "_expires_at_idx", o.Base + "_state_check"} {
			parts := strings.Split(name, ".")
			if len(parts) > 2 {
				t.Fatalf("%q: derived name %q has %d parts", table, name, len(parts))
			}
			for _, p := range parts {
				if p == "" || len(p) > 63 {
					t.Fatalf("%q: derived name %q has a part of %d bytes", table, name, len(p))
				}
				for _, c := range p {
					if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
						t.Fatalf("%q: derived name %q holds %q", table, name, c)
					}
				}
			}
		}
	})
}
