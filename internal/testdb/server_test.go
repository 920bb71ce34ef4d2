package testdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
)

func TestServerStopsAndStarts(t *testing.T) {
	t.Parallel()
	s := testdb.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	query := func() error {
		conn, err := pgx.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
	if err := query(); err != nil {
		t.Fatalf("query a running server: %v", err)
	}
	s.Stop("immediate")
	if err := query(); err == nil {
		t.Fatal("query succeeded against a stopped server")
	}
	s.Start()
	if err := query(); err != nil {
		t.Fatalf("query after restart: %v", err)
	}
}
