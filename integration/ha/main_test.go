// Package ha_test proves idem on a cluster managed the way operators run
// PostgreSQL when one server is not enough: Patroni (three members, each
// managing a PostgreSQL 15 on its own port and data directory, bootstrapped
// by Patroni) on etcd, with clients reaching the primary through HAProxy
// (checking Patroni's REST API) and through a libpq multi-host URL with
// target_session_attrs=read-write. The test starts all of it itself from
// the Debian packages, runs demo instances (cmd/idemdemo) and in-process
// services with an effect outside the database under load, and injects the
// faults Patroni must handle: see TestPatroni.
//
// Run with: make test-ha (or cd integration && IDEM_TEST_HA=1 go test -race ./ha/).
// It runs only with IDEM_TEST_HA set (it takes minutes; make test skips
// it), needs the packages patroni, python3-etcd, etcd-server, haproxy and
// postgresql-15, and is skipped without them, or fails when CI is set.
package ha_test

import (
	"os"
	"testing"

	"github.com/idemkit/idem/integration/internal/pgcontainer"
	"github.com/idemkit/idem/internal/demoproc"
)

// enabled reports whether IDEM_TEST_HA asks for the suite.
func enabled() bool { return os.Getenv("IDEM_TEST_HA") != "" }

func TestMain(m *testing.M) {
	if !enabled() {
		// Every test skips: building the demo would be wasted.
		os.Exit(m.Run())
	}
	// Without -race: the demo's own tests race-test it, and two cores
	// run three PostgreSQL servers, Patroni and etcd here.
	os.Exit(demoproc.Main(pgcontainer.Main(m), false, nil))
}

// requireHA skips t unless the suite was asked for and its tools are
// installed (fails it in CI if they are not).
func requireHA(t *testing.T) {
	t.Helper()
	if !enabled() {
		t.Skip("the Patroni suite runs with IDEM_TEST_HA=1 (make test-ha)")
	}
	requireTools(t)
}
