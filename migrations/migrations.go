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
// with [Options.Table] filled in. The templates are rendered by the
// mechanism pgstore's statements use too (package internal/pgschema), which
// also writes the expressions both must agree on: the NOTIFY payload the
// completion function sends, and its clock. The table name is validated as one or two
// plain lower-case identifiers before any SQL is built, so it never needs
// quoting and cannot inject SQL. The goose version table is named after the
// idem table (Table + "_goose_version", in the same schema), so an
// application's own goose migrations are not disturbed.
//
// The schema of a "schema.table" name must already exist.
//
// # A UTF8 database
//
// The database must be UTF8 (CREATE DATABASE ... ENCODING 'UTF8', the
// default of most installations): Up refuses any other encoding with an
// [*EncodingError], and pgstore refuses to claim in one. See EncodingError
// for what goes wrong otherwise.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/idemkit/idem/internal/pgschema"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// Options configures the migrations. The zero value migrates the table
// "idem_keys" in the connection's current schema, quietly.
type Options struct {
	// Table is the claim table, "table" or "schema.table". Zero means
	// "idem_keys". It must match pgstore.Options.Table.
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

// ErrNoneApplied is returned by [Down] when no migration is applied:
// there is nothing to roll back.
var ErrNoneApplied = errors.New("migrations: no migration is applied")

// ErrEncoding is matched by the error [Up] returns for a database whose
// encoding is not UTF8, an [*EncodingError]: idem needs UTF8 (see
// EncodingError for why). Up then changes nothing.
var ErrEncoding = pgschema.ErrEncoding

// EncodingError names the encoding of a database that is not UTF8. It
// matches [ErrEncoding].
type EncodingError = pgschema.EncodingError

// ErrInvalidTable is returned for a table name that is not one or two plain
// lower-case identifiers.
var ErrInvalidTable = pgschema.ErrInvalidTable

// ValidateTable reports whether table is a valid [Options.Table]: empty
// (meaning "idem_keys"), or one or two plain lower-case identifiers
// ("table" or "schema.table") short enough that no derived name is
// truncated. The error wraps [ErrInvalidTable].
func ValidateTable(table string) error {
	_, err := pgschema.ObjectsFor(table)
	return err
}

// lockID derives the advisory lock id from the table name.
func lockID(o pgschema.Objects) int64 {
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
	{3, "00003_complete_by_primary_key"},
	{4, "00004_request_labels"},
}

// templateData is what the SQL templates see: the objects' names and, for
// the first migration, the partitions to create.
type templateData struct {
	pgschema.Objects
	Partitions []partition
}

type partition struct {
	Name               string
	Modulus, Remainder int
}

func partitionsOf(o pgschema.Objects, n int) []partition {
	ps := make([]partition, n)
	for i := range ps {
		ps[i] = partition{Name: fmt.Sprintf("%s_p%d", o.Table, i), Modulus: n, Remainder: i}
	}
	return ps
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
	o, err := pgschema.ObjectsFor(opts.Table)
	if err != nil {
		return nil, nil, err
	}
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return nil, nil, fmt.Errorf("%w: %d, want 0 to %d", ErrPartitions, opts.Partitions, MaxPartitions)
	}
	data := templateData{Objects: o, Partitions: partitionsOf(o, opts.Partitions)}
	var gms []*goose.Migration
	for _, m := range all {
		up, err := pgschema.Render(sqlFiles, "sql/"+m.name+".up.sql", data)
		if err != nil {
			return nil, nil, fmt.Errorf("migrations: %s: %w", m.name, err)
		}
		down, err := pgschema.Render(sqlFiles, "sql/"+m.name+".down.sql", data)
		if err != nil {
			return nil, nil, fmt.Errorf("migrations: %s: %w", m.name, err)
		}
		gms = append(gms, goose.NewGoMigration(m.version, execFunc(up), execFunc(down)))
	}
	// goose polls pg_try_advisory_lock; its minimum period is one second.
	// Wait up to ten minutes for another replica's migration.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(o)), lock.WithLockTimeout(1, 600))
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
// several goroutines or processes at once. A database whose encoding is not
// UTF8 is refused ([ErrEncoding]) before anything is changed.
func Up(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return err
	}
	defer done()
	if err := checkEncoding(ctx, pool); err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	if opts.Partitions > 0 {
		return checkPartitions(ctx, pool, opts)
	}
	return nil
}

// checkEncoding fails with an [*EncodingError] unless the database is UTF8.
func checkEncoding(ctx context.Context, pool *pgxpool.Pool) error {
	var encoding string
	if err := pool.QueryRow(ctx, pgschema.EncodingQuery).Scan(&encoding); err != nil {
		return fmt.Errorf("migrations: reading the database's encoding: %w", err)
	}
	if err := pgschema.CheckEncoding(encoding); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// checkPartitions fails unless the table has opts.Partitions partitions.
func checkPartitions(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	o, _ := pgschema.ObjectsFor(opts.Table) // validated by newProvider
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
// table too: nothing of idem is left. With no migration applied it returns
// [ErrNoneApplied] and leaves nothing behind either (an empty version table
// is dropped, none is created).
func Down(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return err
	}
	defer done()
	o, _ := pgschema.ObjectsFor(opts.Table) // validated by newProvider
	exists, err := versionTableExists(ctx, pool, o)
	if err != nil {
		return fmt.Errorf("migrations: down: %w", err)
	}
	if !exists {
		return ErrNoneApplied // goose's Down would create the version table
	}
	version, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrations: down: %w", err)
	}
	if version > 0 {
		if _, err := p.Down(ctx); err != nil {
			return fmt.Errorf("migrations: down: %w", err)
		}
		if version, err = p.GetDBVersion(ctx); err != nil {
			return fmt.Errorf("migrations: down: %w", err)
		}
	} else {
		err = ErrNoneApplied
	}
	if version == 0 {
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+o.VersionTable); err != nil {
			return fmt.Errorf("migrations: down: drop the version table: %w", err)
		}
	}
	return err
}

// versionTableExists reports whether goose's version table of o exists.
func versionTableExists(ctx context.Context, pool *pgxpool.Pool, o pgschema.Objects) (bool, error) {
	var exists bool
	err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, o.VersionTable).Scan(&exists)
	return exists, err
}

// MigrationState says whether a migration is applied.
type MigrationState string

// The states of a migration.
const (
	MigrationApplied MigrationState = "applied"
	MigrationPending MigrationState = "pending"
)

// MigrationVersion is one migration and its state in the database.
type MigrationVersion struct {
	// Version is the migration's version, 1 for the first.
	Version int64
	// Name describes the migration ("create_table").
	Name string
	// State is [MigrationApplied] or [MigrationPending].
	State MigrationState
	// AppliedAt is when it was applied; zero when pending.
	AppliedAt time.Time
}

// Status reports every migration and whether it is applied, in version
// order. It writes nothing: without a version table (never migrated, or a
// mistyped table name) every migration is pending.
func Status(ctx context.Context, pool *pgxpool.Pool, opts Options) ([]MigrationVersion, error) {
	p, done, err := newProvider(pool, opts)
	if err != nil {
		return nil, err
	}
	defer done()
	o, _ := pgschema.ObjectsFor(opts.Table) // validated by newProvider
	exists, err := versionTableExists(ctx, pool, o)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	if !exists {
		// goose's Status would create the version table.
		var versions []MigrationVersion
		for _, src := range p.ListSources() {
			versions = append(versions, MigrationVersion{Version: src.Version, Name: nameOf(src.Version), State: MigrationPending})
		}
		return versions, nil
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	versions := make([]MigrationVersion, len(st))
	for i, m := range st {
		versions[i] = MigrationVersion{Version: m.Source.Version, Name: nameOf(m.Source.Version), State: MigrationPending, AppliedAt: m.AppliedAt}
		if m.State == goose.StateApplied {
			versions[i].State = MigrationApplied
		}
	}
	return versions, nil
}

// nameOf is the name of migration version: goose knows the migrations as Go
// functions, without file names.
func nameOf(version int64) string {
	for _, m := range all {
		if m.version == version {
			_, name, _ := strings.Cut(m.name, "_")
			return name
		}
	}
	return ""
}
