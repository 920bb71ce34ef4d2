package pgstore

import (
	"embed"
	"fmt"
	"text/template"

	"github.com/idemkit/idem"
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

// statements holds every statement of sql/, with the table's object names
// filled in (they are validated identifiers; see pgschema.ObjectsFor), each
// bound to the types of its parameters and row (scan.go, queries.go).
type statements struct {
	claim    rowQuery[claimParams, claimRow, *claimRow]
	takeover rowQuery[takeoverParams, takeoverRow, *takeoverRow]
	// claimLimits bound Claim's statements (claim, takeover), sent in
	// the same round trip.
	claimLimits execQuery[claimLimitsParams]
	complete    execQuery[completeParams]
	stale       execQuery[tokenParams]
	renew       rowQuery[renewParams, renewRow, *renewRow]
	release     rowQuery[tokenParams, releaseRow, *releaseRow]
	waitCheck   rowQuery[lookParams, lookRow, *lookRow]
	pollCheck   rowQuery[lookParams, lookRow, *lookRow]
	inspect     rowQuery[keyParams, inspectRow, *inspectRow]
	forget      rowQuery[forgetParams, forgetRow, *forgetRow]
	stats       rowQuery[clockParams, statsRow, *statsRow]
	channel     rowQuery[noParams, channelRow, *channelRow]
	heartbeat   execQuery[heartbeatParams]
	// claimWait is Claim's wait for a claim in a transaction, after
	// claimLimits.
	claimWait execQuery[claimWaitParams]
	// txLimits, txLock, txClaim and txComplete are for a claim's
	// transaction (BeginClaim): the claim's bounds, the key's lock, the
	// look at the key's row (which puts the bounds of the work's
	// statements in place), and the completion that writes the row and
	// raises the stale-claim error itself. txComplete writes a new key's
	// row (a plain INSERT), txTakeover one over the row the claim found
	// (sql/tx_complete.sql with .Takeover); the Large ones are the same
	// for a large body (with .Large).
	txLimits        execQuery[txLimitsParams]
	txLock          rowQuery[txLockParams, txLockRow, *txLockRow]
	txClaim         rowQuery[txClaimParams, txClaimRow, *txClaimRow]
	txComplete      execQuery[txCompleteParams]
	txTakeover      execQuery[txCompleteParams]
	txCompleteLarge execQuery[txCompleteLargeParams]
	txTakeoverLarge execQuery[txCompleteLargeParams]
	// keys lists rows for operators (Store.Keys).
	keys rowsQuery[keysParams, keysRow, *keysRow]
	// completeLarge is complete for a large body, the JSON built in SQL
	// around it (sql/complete.sql with .Large), sent by execLarge.
	completeLarge execQuery[completeLargeParams]
	// forgetQuiet is forget without its NOTIFY, for Options.NoListen:
	// nobody LISTENs, and the engine may have no pg_notify.
	forgetQuiet rowQuery[forgetParams, forgetRow, *forgetRow]
	// sweep is the sweep for idem.DefaultSweepBatch rows; sweepTemplate is
	// rendered by Sweep for other batch sizes, which it writes in (see
	// sweepFor).
	sweep         rowQuery[clockParams, sweepRow, *sweepRow]
	sweepTemplate *template.Template
	obj           pgschema.Objects
}

// statementData is what the statement templates see.
type statementData struct {
	pgschema.Objects
	// Notify is false for forgetQuiet.
	Notify bool
	// Large is true for completeLarge, txCompleteLarge and txTakeoverLarge.
	Large bool
	// Takeover is true for txTakeover and txTakeoverLarge.
	Takeover bool
	// Batch is the sweep's batch size.
	Batch int
}

// sqlFile is one file of sql/ and the statements rendered from it: dst
// with the data every statement sees, and each variant with that data
// changed by vary.
type sqlFile struct {
	name     string
	dst      statement
	variants []variant
}

type variant struct {
	name string // what varies, for messages: ".Large"
	dst  statement
	vary func(*statementData)
}

// files is the registry of sql/: every file, and where its statements go.
// A file that is not here is not rendered (TestEverySQLFileIsRegistered).
func (st *statements) files() []sqlFile {
	return []sqlFile{
		{name: "claim", dst: &st.claim},
		{name: "takeover", dst: &st.takeover},
		{name: "claim_limits", dst: &st.claimLimits},
		{name: "complete", dst: &st.complete, variants: []variant{
			{".Large", &st.completeLarge, func(d *statementData) { d.Large = true }},
		}},
		{name: "claim_wait", dst: &st.claimWait},
		{name: "stale", dst: &st.stale},
		{name: "renew", dst: &st.renew},
		{name: "release", dst: &st.release},
		{name: "wait_check", dst: &st.waitCheck},
		{name: "poll_check", dst: &st.pollCheck},
		{name: "inspect", dst: &st.inspect},
		{name: "forget", dst: &st.forget, variants: []variant{
			{"without .Notify", &st.forgetQuiet, func(d *statementData) { d.Notify = false }},
		}},
		{name: "stats", dst: &st.stats},
		{name: "keys", dst: &st.keys},
		{name: "channel", dst: &st.channel},
		{name: "heartbeat", dst: &st.heartbeat},
		{name: "tx_limits", dst: &st.txLimits},
		{name: "tx_lock", dst: &st.txLock},
		{name: "tx_claim", dst: &st.txClaim},
		{name: "tx_complete", dst: &st.txComplete, variants: []variant{
			{".Takeover", &st.txTakeover, func(d *statementData) { d.Takeover = true }},
			{".Large", &st.txCompleteLarge, func(d *statementData) { d.Large = true }},
			{".Large .Takeover", &st.txTakeoverLarge, func(d *statementData) { d.Large, d.Takeover = true, true }},
		}},
		{name: "sweep", dst: &st.sweep},
	}
}

func buildStatements(o pgschema.Objects) (statements, error) {
	st := statements{obj: o}
	data := statementData{Objects: o, Notify: true, Batch: idem.DefaultSweepBatch}
	for _, f := range st.files() {
		t, err := pgschema.ParseStatement(sqlFiles, "sql/"+f.name+".sql")
		if err != nil {
			return statements{}, fmt.Errorf("pgstore: %w", err)
		}
		if f.name == "sweep" {
			st.sweepTemplate = t
		}
		sql, err := pgschema.Execute(t, data)
		if err != nil {
			return statements{}, fmt.Errorf("pgstore: %w", err)
		}
		f.dst.setSQL(sql)
		for _, v := range f.variants {
			alt := data
			v.vary(&alt)
			if sql, err = pgschema.Execute(t, alt); err != nil {
				return statements{}, fmt.Errorf("pgstore: %w", err)
			}
			v.dst.setSQL(sql)
		}
	}
	return st, nil
}

// sweepFor is the sweep statement for batches of batch rows. The batch
// size is written in as an integer literal, not sent as a parameter, so
// that the planner knows how few rows the scans return (see sql/sweep.sql).
func (st *statements) sweepFor(batch int) (rowQuery[clockParams, sweepRow, *sweepRow], error) {
	if batch == idem.DefaultSweepBatch {
		return st.sweep, nil
	}
	sql, err := pgschema.Execute(st.sweepTemplate, statementData{Objects: st.obj, Batch: batch})
	if err != nil {
		return rowQuery[clockParams, sweepRow, *sweepRow]{}, fmt.Errorf("pgstore: %w", err)
	}
	return rowQuery[clockParams, sweepRow, *sweepRow]{sql: sql}, nil
}
