package pgstore

import (
	"embed"
	"fmt"
	"text/template"

	"github.com/idemkit/idem/internal/pgschema"
)

// The SQL of every operation is in sql/, one statement a file named for the
// operation (sql/claim.sql is Claim's), with its explanation as the comment
// it starts with. The files are templates of package internal/pgschema, the
// mechanism the migrations use too: {{.Table}} and the other object names,
// {{now "$n"}} for the clock and {{payload "scope" "key"}} for the NOTIFY
// payload.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statements holds the SQL of every operation, with the table's object
// names filled in (they are validated identifiers; see pgschema.ObjectsFor).
//
// Parameters common to all: scope is bytea (the exact bytes of the Go
// string), key is text, and the "now" parameter is a nullable timestamptz:
// null means the database clock, statement_timestamp().
type statements struct {
	claim, takeover, complete, stale, renew, release, waitCheck, pollCheck, inspect, forget, stats, channel, heartbeat string
	// txLimits, txRestore and txComplete are for a claim's transaction
	// (BeginClaim): its bounds, the session's lock_timeout put back after
	// a claim statement, and the completion that raises the stale-claim
	// error itself (sql/complete.sql with .Tx).
	txLimits, txRestore, txComplete string
	// keys lists rows for operators (Store.Keys).
	keys string
	// completeLarge is complete for a large body, the JSON built in SQL
	// around it (sql/complete.sql with .Large).
	completeLarge string
	// forgetQuiet is forget without its NOTIFY, for Options.NoListen:
	// nobody LISTENs, and the engine may have no pg_notify.
	forgetQuiet string
	// sweep is rendered by Sweep, which writes in the batch size
	// (see sweepSQL).
	sweep *template.Template
	obj   pgschema.Objects
}

// statementData is what the statement templates see.
type statementData struct {
	pgschema.Objects
	// Notify is false for forgetQuiet.
	Notify bool
	// Large is true for completeLarge.
	Large bool
	// Tx is true for txComplete.
	Tx bool
	// Batch is the sweep's batch size.
	Batch int
}

func buildStatements(o pgschema.Objects) (statements, error) {
	st := statements{obj: o}
	data := statementData{Objects: o, Notify: true}
	type variant struct {
		dst  *string
		vary func(*statementData)
	}
	for _, s := range []struct {
		file string
		dst  *string
		// variants each receive the file rendered once more, with vary
		// applied to the data.
		variants []variant
	}{
		{file: "claim", dst: &st.claim},
		{file: "takeover", dst: &st.takeover},
		{file: "complete", dst: &st.complete, variants: []variant{
			{&st.completeLarge, func(d *statementData) { d.Large = true }},
			{&st.txComplete, func(d *statementData) { d.Tx = true }},
		}},
		{file: "stale", dst: &st.stale},
		{file: "renew", dst: &st.renew},
		{file: "release", dst: &st.release},
		{file: "wait_check", dst: &st.waitCheck},
		{file: "poll_check", dst: &st.pollCheck},
		{file: "inspect", dst: &st.inspect},
		{file: "forget", dst: &st.forget, variants: []variant{{&st.forgetQuiet, func(d *statementData) { d.Notify = false }}}},
		{file: "stats", dst: &st.stats},
		{file: "keys", dst: &st.keys},
		{file: "channel", dst: &st.channel},
		{file: "heartbeat", dst: &st.heartbeat},
		{file: "tx_limits", dst: &st.txLimits},
		{file: "tx_restore", dst: &st.txRestore},
	} {
		t, err := pgschema.ParseStatement(sqlFiles, "sql/"+s.file+".sql")
		if err != nil {
			return statements{}, fmt.Errorf("pgstore: %w", err)
		}
		if *s.dst, err = pgschema.Execute(t, data); err != nil {
			return statements{}, fmt.Errorf("pgstore: %w", err)
		}
		for _, v := range s.variants {
			alt := data
			v.vary(&alt)
			if *v.dst, err = pgschema.Execute(t, alt); err != nil {
				return statements{}, fmt.Errorf("pgstore: %w", err)
			}
		}
	}
	var err error
	if st.sweep, err = pgschema.ParseStatement(sqlFiles, "sql/sweep.sql"); err != nil {
		return statements{}, fmt.Errorf("pgstore: %w", err)
	}
	if _, err := st.sweepSQL(DefaultSweepBatch); err != nil {
		return statements{}, err
	}
	return st, nil
}

// sweepSQL is the sweep statement for batches of batch rows. The batch size
// is written in as an integer literal, not sent as a parameter, so that the
// planner knows how few rows the scans return (see sql/sweep.sql).
func (st statements) sweepSQL(batch int) (string, error) {
	sql, err := pgschema.Execute(st.sweep, statementData{Objects: st.obj, Batch: batch})
	if err != nil {
		return "", fmt.Errorf("pgstore: %w", err)
	}
	return sql, nil
}
