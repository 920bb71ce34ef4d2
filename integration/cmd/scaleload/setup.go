package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/demoproc"
)

// freshSchema creates a schema of its own and returns the database URL
// with search_path set to it, and a function that drops it.
func freshSchema(ctx context.Context, cfg config) (string, *pgxpool.Pool, func(), error) {
	admin, err := pgxpool.New(ctx, cfg.dbURL)
	if err != nil {
		return "", nil, nil, err
	}
	schema := fmt.Sprintf("scaleload_%08x", rand.Uint32())
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return "", nil, nil, err
	}
	u, err := url.Parse(cfg.dbURL)
	if err != nil {
		admin.Close()
		return "", nil, nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	drop := func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`)
		admin.Close()
	}
	return u.String(), admin, drop, nil
}

// setupFloor prepares the floor: a schema with the demo's invoices table and
// a pool of -clients connections. With notify, each invoice transaction
// also calls pg_notify, as a completion whose row a waiter marked does:
// what notifying on every commit costs PostgreSQL alone. The returned
// function drops them.
func setupFloor(ctx context.Context, cfg config, notify bool) (target, func(), error) {
	dbURL, _, drop, err := freshSchema(ctx, cfg)
	if err != nil {
		return target{}, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		drop()
		return target{}, nil, err
	}
	pcfg.MaxConns = int32(cfg.clients)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		drop()
		return target{}, nil, err
	}
	closeAll := func() { pool.Close(); drop() }
	// The demo's table, as it creates it.
	if _, err := pool.Exec(ctx, `CREATE TABLE idemdemo_invoices (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, customer text NOT NULL,
		amount_cents bigint NOT NULL CHECK (amount_cents > 0), created_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		closeAll()
		return target{}, nil, err
	}
	made := make([][]int64, cfg.clients)
	name := "floor (pgx, no idem)"
	if notify {
		name = "floor + pg_notify per invoice"
	}
	return target{name: name, op: func(ctx context.Context, w int, retry bool) (int, error) {
		if retry && len(made[w]) > 0 {
			var id, amount int64
			var customer string
			err := pool.QueryRow(ctx, `SELECT id, customer, amount_cents FROM idemdemo_invoices WHERE id = $1`,
				made[w][rand.IntN(len(made[w]))]).Scan(&id, &customer, &amount)
			return http.StatusCreated, err
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO idemdemo_invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id`,
			fmt.Sprintf("customer-%d", w), 1250).Scan(&id); err != nil {
			return 0, err
		}
		if notify {
			if _, err := tx.Exec(ctx, `SELECT pg_notify('scaleload', $1)`, strconv.FormatInt(id, 10)); err != nil {
				return 0, err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
		made[w] = append(made[w], id)
		return http.StatusCreated, nil
	}}, closeAll, nil
}

// answered is a key a worker was answered for, and where.
type answered struct {
	key, body string
	instance  int
}

// setupInstances starts n demo processes on a schema of their own. The
// returned function stops them and drops the schema.
func setupInstances(ctx context.Context, cfg config, b demoBinary, n int) (target, func(), error) {
	dbURL, _, drop, err := freshSchema(ctx, cfg)
	if err != nil {
		return target{}, nil, err
	}
	var demos []*demoproc.Process
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.clients}, Timeout: 30 * time.Second}
	closeAll := func() {
		client.CloseIdleConnections()
		for _, d := range demos {
			_ = d.Terminate()
		}
		drop()
	}
	// Each instance may use as many connections as there are clients,
	// like the floor's pool (pgx's default is 4).
	u, _ := url.Parse(dbURL)
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(cfg.clients))
	u.RawQuery = q.Encode()
	var bases []string
	for range n {
		d, err := demoproc.Launch(demoproc.Config{Binary: b.path, DatabaseURL: u.String(), Args: cfg.demoArgs})
		if err != nil {
			closeAll()
			return target{}, nil, err
		}
		demos = append(demos, d)
		bases = append(bases, d.URL())
	}
	run := fmt.Sprintf("%08x", rand.Uint32())
	made := make([][]answered, cfg.clients)
	next := make([]int, cfg.clients)
	name := fmt.Sprintf("instances=%d", n)
	if b.label != "" {
		name += " (" + b.label + ")"
	}
	return target{name: name, op: func(ctx context.Context, w int, retry bool) (int, error) {
		instance := next[w] % n
		next[w]++
		var a answered
		if retry && len(made[w]) > 0 {
			a = made[w][rand.IntN(len(made[w]))]
			if n > 1 && instance == a.instance {
				instance = (instance + 1) % n // a retry arrives elsewhere
			}
		} else {
			retry = false
			key := fmt.Sprintf("%s-%d-%d", run, w, len(made[w]))
			b, _ := json.Marshal(map[string]any{"customer": key, "amount_cents": 1250})
			a = answered{key: key, body: string(b), instance: instance}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, bases[instance]+"/invoices", strings.NewReader(a.body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", a.key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated && !retry {
			made[w] = append(made[w], a)
		}
		return resp.StatusCode, nil
	}}, closeAll, nil
}
