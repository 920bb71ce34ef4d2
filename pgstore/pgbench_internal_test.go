package pgstore

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/pgschema"
)

var updatePgbench = flag.Bool("update-pgbench", false, "rewrite scripts/pgbench/onecommit.sql and twophase.sql from the statements")

// pgbenchArgs are the values scripts/pgbench/ sends for the statements'
// parameters, by the Go field they stand for: a key of its own per
// transaction (:k, :client_id), the lock key the random :k itself (a
// bigint, as pgstore sends the key's hash), the generation the claim drew
// as the session's currval (pgbench cannot read a result inside a
// pipeline, and pgstore sends it as a parameter).
var pgbenchArgs = map[string]string{
	"scope":       `'\x7363'::bytea`,
	"key":         `('key/' || :k || '-' || :client_id)`,
	"fingerprint": `'ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'`,
	"owner":       `'pgbench'`,
	"lease":       `30000000`,
	"now":         `NULL`,
	"lock":        `(:k)`,
	"generation":  `currval('idem_keys_generation_seq')`,
	"result":      `'{"status":201,"header":{"Content-Type":["application/json"]},"body":"{\"id\":\"inv_0000000000\",\"customer\":\"ACME\",\"amount_cents\":12345}"}'`,
	"retention":   `86400000000`,
	"created":     `statement_timestamp()`,
	"takenOver":   `0`,
	"wait":        `5000`,
	"idle":        `30000`,
	"execution":   `300000`,
	"takeover":    `false`,
	"method":      `'POST'`,
	"route":       `'POST /invoices'`,
	"caller":      `'pgbench'`,
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// pgbenchStatement is sql, a statement of the registry, with its
// parameters, named in order by names, replaced by pgbenchArgs, ended by
// a semicolon.
func pgbenchStatement(t *testing.T, sql string, names ...string) string {
	t.Helper()
	out := placeholder.ReplaceAllStringFunc(sql, func(p string) string {
		var n int
		fmt.Sscan(p[1:], &n)
		if n < 1 || n > len(names) {
			t.Fatalf("no value for %s in %s", p, sql)
		}
		v, ok := pgbenchArgs[names[n-1]]
		if !ok {
			t.Fatalf("no pgbench value named %q", names[n-1])
		}
		return v
	})
	return strings.TrimSpace(out) + ";\n"
}

// TestPgbenchScriptsMatchTheStatements: scripts/pgbench/onecommit.sql and
// twophase.sql are the statements pgstore sends, rendered from its
// registry, so that they cannot drift from the code. Rewrite them with
// go test ./pgstore -run TestPgbenchScriptsMatchTheStatements -update-pgbench.
func TestPgbenchScriptsMatchTheStatements(t *testing.T) {
	o, err := pgschema.ObjectsFor("")
	if err != nil {
		t.Fatal(err)
	}
	st, err := buildStatements(o)
	if err != nil {
		t.Fatal(err)
	}
	claim := []string{"scope", "key", "fingerprint", "owner", "lease", "now", "lock", "method", "route", "caller"}
	complete := []string{"scope", "key", "generation", "result", "retention", "now"}
	const invoice = "INSERT INTO invoices (customer, amount_cents) VALUES ('ACME', 12345);\n"
	scripts := map[string]string{
		"onecommit.sql": `-- idem's one-commit path (pgstore.BeginClaim, then Commit), generated
-- from pgstore's statements (pgstore/sql/tx_limits.sql, tx_lock.sql,
-- tx_claim.sql, tx_complete.sql) by TestPgbenchScriptsMatchTheStatements,
-- in its three round trips: BEGIN with the bounds, the key's lock and the
-- look; the invoice; the row written once with its result, and COMMIT.
-- The lock key is the random :k (pgstore sends the key's hash, a bigint);
-- the generation the look drew is the session's currval of the sequence
-- (pgbench cannot read a result inside a pipeline).
\set k random(1, 9000000000000000000)
\startpipeline
BEGIN;
` + pgbenchStatement(t, st.txLimits.sql, "wait", "idle") +
			pgbenchStatement(t, st.txLock.sql, "lock") +
			pgbenchStatement(t, st.txClaim.sql, "scope", "key", "now", "execution") +
			`\endpipeline
` + invoice + `\startpipeline
` + pgbenchStatement(t, st.txComplete.sql, append(complete, "fingerprint", "owner", "takeover", "created", "takenOver", "method", "route", "caller")...) +
			`COMMIT;
\endpipeline
`,
		"twophase.sql": `-- idem's two-phase path as the demo uses it with CompleteTx, generated
-- from pgstore's statements (pgstore/sql/claim.sql, complete.sql) by
-- TestPgbenchScriptsMatchTheStatements: the claim commits on its own,
-- then the invoice and the completion in a transaction: two commits,
-- five round trips.
\set k random(1, 9000000000000000000)
` + pgbenchStatement(t, st.claim.sql, claim...) + "BEGIN;\n" + invoice +
			pgbenchStatement(t, st.complete.sql, complete...) + "COMMIT;\n",
	}
	for name, want := range scripts {
		path := filepath.Join("..", "scripts", "pgbench", name)
		if *updatePgbench {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not what pgstore sends; rewrite it with go test ./pgstore -run TestPgbenchScriptsMatchTheStatements -update-pgbench", path)
		}
	}
}
