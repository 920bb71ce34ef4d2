package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrations"
	"github.com/idemkit/idem/pgstore"
)

// encodedDatabase creates a database of the given server encoding on the
// tests' cluster (C collation: any encoding goes with it), dropped when t
// ends, and returns a pool on it. It connects directly, never through a
// pooler, which would not know the database.
func encodedDatabase(t *testing.T, encoding string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url := testdb.URL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test_enc_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING '"+encoding+"' LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
		t.Fatalf("create a %s database: %v", encoding, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("connect for cleanup: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = name
	return testdb.NewPool(t, cfg)
}

// TestNonUTF8Database: pgstore needs a UTF8 database. One in LATIN1 or
// SQL_ASCII is refused before any request runs, with a typed error naming
// its encoding: by migrations.Up, which creates nothing, and, should a
// table exist anyway, by the store's first claim, which claims nothing.
// Refusing early matters: on a LATIN1 database a large text body would
// fail its completion (SQLSTATE 22P05) after the work ran.
func TestNonUTF8Database(t *testing.T) {
	t.Parallel()
	for _, encoding := range []string{"LATIN1", "SQL_ASCII"} {
		t.Run(encoding, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			pool := encodedDatabase(t, encoding)
			err := migrations.Up(ctx, pool, migrations.Options{})
			var encErr *migrations.EncodingError
			if !errors.As(err, &encErr) || encErr.Encoding != encoding || !errors.Is(err, migrations.ErrEncoding) {
				t.Fatalf("migrations.Up on a %s database = %v, want an EncodingError naming %s", encoding, err, encoding)
			}
			var tables int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables); err != nil || tables != 0 {
				t.Fatalf("%d tables after the refused migration (%v), want none", tables, err)
			}
			// The statements would find a table of that name; the store
			// must refuse before it runs any of them.
			if _, err := pool.Exec(ctx, `CREATE TABLE idem_keys (scope bytea, key text)`); err != nil {
				t.Fatal(err)
			}
			s := newStore(t, pool, pgstore.Options{})
			for range 2 { // the refusal is remembered, not only the first claim's
				_, err := s.Claim(ctx, idem.ClaimRequest{Scope: "s", Key: key("k")})
				if !errors.As(err, &encErr) || encErr.Encoding != encoding || !errors.Is(err, migrations.ErrEncoding) {
					t.Fatalf("Claim on a %s database = %v, want an EncodingError naming %s", encoding, err, encoding)
				}
			}
			var rows int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM idem_keys`).Scan(&rows); err != nil || rows != 0 {
				t.Fatalf("%d rows after refused claims (%v), want none", rows, err)
			}
		})
	}
}
