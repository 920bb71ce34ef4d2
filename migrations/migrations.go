// Package migrations creates and upgrades the PostgreSQL schema of pgstore
// with goose (github.com/pressly/goose/v3).
//
// The SQL is embedded in the binary (//go:embed) and run through a goose
// [goose.Provider], so applications migrate at start without shipping files:
//
//	if err := migrations.Up(ctx, pool, migrations.Options{}); err != nil { ... }
//
// # Several replicas starting at once
//
// Up takes a PostgreSQL session-level advisory lock (goose's session locker)
// before it looks at the version table, so replicas that start together
// apply each migration exactly once: the first one migrates, the others wait
// for the lock and then find nothing to do. The lock id is derived from the
// table name, so two idem tables in one database migrate independently.
//
// # Configurable table name
//
// goose SQL files cannot take parameters, so each embedded SQL file is a
// template registered on the Provider as a Go migration that runs the SQL
// with [Options.Table] filled in. The table name is validated as one or two
// plain lower-case identifiers before any SQL is built, so it never needs
// quoting and cannot inject SQL. The goose version table is named after the
// idem table (Table + "_goose_version", in the same schema), so an
// application's own goose migrations are not disturbed.
//
// The schema of a "schema.table" name must already exist.
package migrations

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// DefaultTable is the table name used when [Options.Table] is empty.
const DefaultTable = "idem_keys"

// StaleClaimSQLState is the SQLSTATE the completion function raises when the
// generation it is given no longer holds the key. pgstore maps it to
// *idem.StaleClaimError.
const StaleClaimSQLState = "IDM01"

//go:embed sql/*.sql
var sqlFiles embed.FS

// Options configures the migrations. The zero value migrates the table
// "idem_keys" in the connection's current schema, quietly.
type Options struct {
	// Table is the claim table, "table" or "schema.table". Zero means
	// [DefaultTable]. It must match pgstore.Options.Table.
	Table string
	// Logger receives goose's progress messages. Nil means discard.
	Logger *slog.Logger
	// Partitions, when positive, makes the first migration create the claim
	// table PARTITION BY HASH (scope, key) with that many partitions
	// (Table + "_p0" ...), at most [MaxPartitions]. Every index and
	// constraint is declared on the parent, so each partition has its own
	// primary key and sweeper indexes, and later migrations (ALTER TABLE,
	// CREATE INDEX on the parent) reach every partition. Zero creates an
	// ordinary table. The table is created once: on a table that exists, a
	// positive Partitions that differs from its partition count makes Up
	// fail with [ErrPartitions] (repartitioning is a manual copy, see
	// docs/operations.md); zero accepts whatever exists.
	Partitions int
}

// MaxPartitions bounds [Options.Partitions].
const MaxPartitions = 1024

// ErrPartitions is returned for an invalid [Options.Partitions], or one that
// does not match the existing table.
var ErrPartitions = errors.New("migrations: partitions")

// Objects names the database objects the migrations create for one table.
// pgstore uses it to address them.
type Objects struct {
	// Table is the claim table as configured, possibly schema-qualified.
	Table string
	// Base is the unqualified table name, the prefix of index names.
	Base string
	// Sequence issues generations.
	Sequence string
	// CompleteFunc is the completion function (see the SQL).
	CompleteFunc string
	// ChannelSQL is an SQL expression for the LISTEN/NOTIFY channel
	// completions and releases are announced on: "idem_" and the table's
	// oid, so that tables of the same name in different schemas (or
	// databases) never share a channel. The payload is the hex MD5 of
	// scope, a NUL byte, and key: it names the key within NOTIFY's payload
	// limit.
	ChannelSQL string
	// VersionTable is goose's version table for this claim table.
	VersionTable string
	// StaleState is [StaleClaimSQLState].
	StaleState string
}

// ErrInvalidTable is returned for a table name that is not one or two plain
// lower-case identifiers.
var ErrInvalidTable = errors.New("migrations: invalid table name")

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
		return Objects{}, fmt.Errorf("%w %q: want table or schema.table, lower-case letters, digits and underscores, table at most 48 bytes", ErrInvalidTable, table)
	}
	return Objects{
		Table:        table,
		Base:         base,
		Sequence:     table + "_generation_seq",
		CompleteFunc: table + "_complete",
		ChannelSQL:   "'idem_' || '" + table + "'::regclass::oid",
		VersionTable: table + "_goose_version",
		StaleState:   StaleClaimSQLState,
	}, nil
}

// lockID derives the advisory lock id from the table name.
func (o Objects) lockID() int64 {
	sum := sha256.Sum256([]byte("idem migrations:" + o.Table))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// migration is one embedded up/down pair.
type migration struct {
	version int64
	name    string // file name prefix in sql/
}

var all = []migration{
	{1, "00001_create_table"},
	{2, "00002_notify_waiters"},
}

// templateData is what the SQL templates see: the objects' names and, for
// the first migration, the partitions to create.
type templateData struct {
	Objects
	Partitions []partition
}

type partition struct {
	Name               string
	Modulus, Remainder int
}

func partitionsOf(o Objects, n int) []partition {
	ps := make([]partition, n)
	for i := range ps {
		ps[i] = partition{Name: fmt.Sprintf("%s_p%d", o.Table, i), Modulus: n, Remainder: i}
	}
	return ps
}

func render(name string, o templateData) (string, error) {
	src, err := sqlFiles.ReadFile("sql/" + name)
	if err != nil {
		return "", err
	}
	tmpl, err := template.New(name).Option("missingkey=error").Parse(string(src))
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, o); err != nil {
		return "", err
	}
	return b.String(), nil
}

func execFunc(sqlText string) *goose.GoFunc {
	return &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, sqlText)
		return err
	}}
}

// newProvider builds a goose provider on pool. The returned close function
// releases the database/sql handle (not the pool).
func newProvider(pool *pgxpool.Pool, opts Options) (*goose.Provider, func(), error) {
	if pool == nil {
		return nil, nil, errors.New("migrations: nil pool")
	}
	o, err := ObjectsFor(opts.Table)
	if err != nil {
		return nil, nil, err
	}
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return nil, nil, fmt.Errorf("%w: %d, want 0 to %d", ErrPartitions, opts.Partitions, MaxPartitions)
	}
	data := templateData{Objects: o, Partitions: partitionsOf(o, opts.Partitions)}
	var gms []*goose.Migration
	for _, m := range all {
		up, err := render(m.name+".up.sql", data)
		if err != nil {
			return nil, nil, fmt.Errorf("migrations: %s: %w", m.name, err)
		}
		down, err := render(m.name+".down.sql", data)
		if err != nil {
			return nil, nil, fmt.Errorf("migrations: %s: %w", m.name, err)
		}
		gms = append(gms, goose.NewGoMigration(m.version, execFunc(up), execFunc(down)))
	}
	// goose polls pg_try_advisory_lock; its minimum period is one second.
	// Wait up to ten minutes for another replica's migration.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(o.lockID()), lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, nil,
		goose.WithTableName(o.VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithGoMigrations(gms...),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
	)
	if err != nil {
		_ = db.Close()
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	return p, func() { _ = db.Close() }, nil
}

// Up applies every migration not yet applied. It is safe to call from
// several goroutines or processes at once.
func Up(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return err
	}
	defer done()
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	if opts.Partitions > 0 {
		return checkPartitions(ctx, pool, opts)
	}
	return nil
}

// checkPartitions fails unless the table has opts.Partitions partitions.
func checkPartitions(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	o, _ := ObjectsFor(opts.Table) // validated by newProvider
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, o.Table).Scan(&n); err != nil {
		return fmt.Errorf("migrations: counting partitions: %w", err)
	}
	if n != opts.Partitions {
		return fmt.Errorf("%w: table %s has %d partitions, Options.Partitions is %d", ErrPartitions, o.Table, n, opts.Partitions)
	}
	return nil
}

// upTo applies the migrations up to version, for the upgrade test.
func upTo(ctx context.Context, pool *pgxpool.Pool, opts Options, version int64) error {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return err
	}
	defer done()
	if _, err := p.UpTo(ctx, version); err != nil {
		return fmt.Errorf("migrations: up to %d: %w", version, err)
	}
	return nil
}

// Down rolls back the most recent migration. Rolling back the first one
// drops the table and every recorded result, and then the goose version
// table too: nothing of idem is left.
func Down(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return err
	}
	defer done()
	if _, err := p.Down(ctx); err != nil {
		return fmt.Errorf("migrations: down: %w", err)
	}
	version, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrations: down: %w", err)
	}
	if version == 0 {
		o, _ := ObjectsFor(opts.Table) // validated by newProvider
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+o.VersionTable); err != nil {
			return fmt.Errorf("migrations: down: drop the version table: %w", err)
		}
	}
	return nil
}

// MigrationStatus is the state of one migration.
type MigrationStatus = goose.MigrationStatus

// Status reports every migration and whether it is applied, in version
// order. It writes nothing: without a version table (never migrated, or a
// mistyped table name) every migration is pending.
func Status(ctx context.Context, pool *pgxpool.Pool, opts Options) ([]*MigrationStatus, error) {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return nil, err
	}
	defer done()
	o, _ := ObjectsFor(opts.Table) // validated by newProvider
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, o.VersionTable).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	if !exists {
		// goose's Status would create the version table.
		var st []*MigrationStatus
		for _, src := range p.ListSources() {
			st = append(st, &MigrationStatus{Source: src, State: goose.StatePending})
		}
		return st, nil
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	return st, nil
}
