package pgschema_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgschema"
)

// FuzzObjectsFor checks that every table name ObjectsFor accepts is safe to
// paste into SQL unquoted, and that no derived name exceeds PostgreSQL's
// 63-byte identifiers (which would be truncated silently).
func FuzzObjectsFor(f *testing.F) {
	for _, s := range []string{"", "idem_keys", "ops.idem_keys", "a.b.c", "X", `a"b`, "a;b", "a\x00", "é", strings.Repeat("a", 48), strings.Repeat("a", 49)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, table string) {
		o, err := pgschema.ObjectsFor(table)
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

func TestObjectsForValidates(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"Idem", "idem keys", "a.b.c", "1abc", "idem;drop", `"idem"`, ".idem", "idem.",
		"a23456789012345678901234567890123456789012345678x", // 49 bytes
	} {
		if _, err := pgschema.ObjectsFor(name); !errors.Is(err, pgschema.ErrInvalidTable) {
			t.Errorf("ObjectsFor(%q) = %v, want ErrInvalidTable", name, err)
		}
	}
	for _, name := range []string{"", "idem_keys", "ops.idem_keys", "a23456789012345678901234567890123456789012345678"} {
		if _, err := pgschema.ObjectsFor(name); err != nil {
			t.Errorf("ObjectsFor(%q) = %v", name, err)
		}
	}
	o, _ := pgschema.ObjectsFor("")
	if o.Table != pgschema.DefaultTable {
		t.Errorf("default table = %q", o.Table)
	}
}
