package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/internal/pgcontainer"
	"github.com/idemkit/idem/integration/robustness/wire"
	"github.com/idemkit/idem/pgstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgcontainer.Main(m),
		// toxiproxy (v2.12.0) leaves a link's goroutines behind after its
		// proxy stopped: a toxic's pipe blocked sending to a link torn
		// down, a reader of a closed stream. They are the library's, idle,
		// and end with the test binary.
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicCollection).StartLink.func1"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/stream.(*ChanReader).Read"),
	)
}

// runConfig is one run: read from the environment (make robustness sets
// it), each field with its default.
type runConfig struct {
	seed     int64
	duration time.Duration // of the load; setup, settling and checking come on top
	faults   []string
	spec     string // the FAULTS value, for the rerun line
	mutant   string

	instances       int
	clients         int
	keys            int
	lease           time.Duration
	wait            time.Duration
	storeTimeout    time.Duration
	sweepEvery      time.Duration
	shutdownTimeout time.Duration
	artifacts       string
	race            bool
}

func configFromEnv(t *testing.T) runConfig {
	t.Helper()
	cfg := runConfig{
		instances: 3, clients: 12, keys: 6,
		lease: time.Second, wait: 500 * time.Millisecond, storeTimeout: time.Second,
		sweepEvery: 500 * time.Millisecond, shutdownTimeout: 300 * time.Millisecond,
		seed: time.Now().UnixNano() % 1_000_000_000,
	}
	var err error
	if cfg.duration, err = time.ParseDuration(os.Getenv("ROBUSTNESS_DURATION")); err != nil || cfg.duration < 10*time.Second {
		t.Fatalf("ROBUSTNESS_DURATION=%q: want a duration of at least 10s", os.Getenv("ROBUSTNESS_DURATION"))
	}
	if s := os.Getenv("ROBUSTNESS_SEED"); s != "" {
		if cfg.seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("ROBUSTNESS_SEED=%q: %v", s, err)
		}
	}
	cfg.spec = os.Getenv("ROBUSTNESS_FAULTS")
	if cfg.spec == "" {
		cfg.spec = "all"
	}
	if cfg.faults, err = pickFaults(cfg.spec, cfg.seed); err != nil {
		t.Fatal(err)
	}
	cfg.mutant = os.Getenv("ROBUSTNESS_MUTANT")
	for name, p := range map[string]*int{"ROBUSTNESS_INSTANCES": &cfg.instances, "ROBUSTNESS_CLIENTS": &cfg.clients, "ROBUSTNESS_KEYS": &cfg.keys} {
		if s := os.Getenv(name); s != "" {
			if *p, err = strconv.Atoi(s); err != nil || *p < 1 {
				t.Fatalf("%s=%q: want a positive integer", name, s)
			}
		}
	}
	if cfg.instances < 2 {
		t.Fatal("ROBUSTNESS_INSTANCES: at least 2, so that retries can go elsewhere")
	}
	cfg.artifacts = os.Getenv("ROBUSTNESS_ARTIFACTS")
	if cfg.artifacts == "" {
		cfg.artifacts = fmt.Sprintf("testdata/artifacts/seed-%d", cfg.seed)
	}
	cfg.race = os.Getenv("ROBUSTNESS_RACE") == "1"
	return cfg
}

// rerun is the command that runs the same schedule again.
func (cfg runConfig) rerun() string {
	s := fmt.Sprintf("make robustness SEED=%d DURATION=%s FAULTS=%s", cfg.seed, cfg.duration, cfg.spec)
	if cfg.mutant != "" {
		s += " MUTANT=" + cfg.mutant
	}
	return s
}

// TestRobustness is the run: see the package documentation. It needs
// ROBUSTNESS_DURATION (make robustness sets it); PostgreSQL's server
// binaries or a Docker engine for the private server it crashes.
func TestRobustness(t *testing.T) {
	if os.Getenv("ROBUSTNESS_DURATION") == "" {
		t.Skip("the robustness run needs ROBUSTNESS_DURATION: make robustness (or make robustness DURATION=2m)")
	}
	cfg := configFromEnv(t)
	sched := schedule(cfg.seed, cfg.duration, cfg.faults, cfg.instances, cfg.lease)
	fmt.Printf("robustness: seed %d, load %v, %d instances, %d clients, %d active keys, lease %v\n",
		cfg.seed, cfg.duration, cfg.instances, cfg.clients, cfg.keys, cfg.lease)
	if cfg.mutant != "" {
		fmt.Printf("robustness: MUTANT %s (a deliberately broken build: the run must find a violation)\n", cfg.mutant)
	}
	fmt.Printf("robustness: faults %s; schedule (%d):\n", strings.Join(cfg.faults, ","), len(sched))
	for _, f := range sched {
		fmt.Println("  " + f.String())
	}
	fmt.Println("robustness: rerun with: " + cfg.rerun())

	bin, err := buildService(t.TempDir(), cfg.mutant != "", cfg.race)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{}
	c := newCluster(t, cfg, bin, clk)
	h, stats := drive(t, c, cfg, sched)
	rep := check(h)
	summary := summarize(cfg, h, rep, stats)
	fmt.Print(summary)

	caught := len(rep.violations) > 0
	if caught {
		dir, err := writeArtifacts(cfg, h, rep, summary)
		if err != nil {
			t.Errorf("writing artifacts: %v", err)
		}
		fmt.Printf("robustness: artifacts in %s\n", dir)
	}
	switch {
	case cfg.mutant != "" && !caught:
		t.Errorf("mutant %s was not caught in %v (%d operations); rerun: %s", cfg.mutant, cfg.duration, len(h.attempts), cfg.rerun())
	case cfg.mutant == "" && caught:
		t.Errorf("%d violations; rerun: %s", len(rep.violations), cfg.rerun())
	}
}

// runStats is what the summary reports of the run beside the history.
type runStats struct {
	load, settle time.Duration
}

// drive runs the load with the faults, lets the system settle, and collects
// the history.
func drive(t *testing.T, c *cluster, cfg runConfig, sched []fault) (*history, runStats) {
	t.Helper()
	var stats runStats
	keys := newKeySpace(cfg.seed, cfg.keys)
	hist := &recorder{}
	clk := c.clock
	clk.start = time.Now()

	ctx, stop := context.WithTimeout(t.Context(), cfg.duration)
	defer stop()
	in := &injector{c: c}
	in.run(ctx, clk.start, sched)
	sampleCtx, stopSampling := context.WithCancel(t.Context())
	samples := make(chan []pgSample, 1)
	go func() { samples <- c.samplePostgres(sampleCtx) }()
	// A stall of the whole machine loses leases as a pause does, with no
	// fault injected: the watcher sees it, so that the check can tell it
	// from a lease lost for nothing.
	stalls := watchStalls(sampleCtx, clk.start.UnixNano(), clk.now)
	var clients sync.WaitGroup
	for i := range cfg.clients {
		cl := newClient(i, cfg.seed, c, keys, hist)
		clients.Go(func() { cl.run(ctx) })
	}
	progress := time.NewTicker(15 * time.Second)
	defer progress.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-progress.C:
			fmt.Printf("robustness: %v, %d operations\n", time.Since(clk.start).Round(time.Second), hist.count())
		}
	}
	clients.Wait()
	in.wait()
	stats.load = time.Since(clk.start)

	// The faults are over: every instance runs, and every key gets its
	// answer from a client that retries until it does.
	settleStart := time.Now()
	for _, n := range c.nodes {
		if n.current() == nil {
			if err := n.start(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var unsettled []string
	var mu sync.Mutex
	var settlers sync.WaitGroup
	all := keys.keys()
	for i := range cfg.clients {
		cl := newClient(1000+i, cfg.seed, c, keys, hist)
		settlers.Go(func() {
			for j := i; j < len(all); j += cfg.clients {
				k := all[j]
				a := cl.request(context.Background(), k, k.req, 30*time.Second, false)
				if a.Outcome != outAnswer && a.Outcome != outReplay && a.Outcome != outUnreplayable {
					mu.Lock()
					unsettled = append(unsettled, k.name)
					mu.Unlock()
				}
			}
		})
	}
	settlers.Wait()
	// Claims abandoned by the faults run out and are swept.
	time.Sleep(cfg.lease + 3*cfg.sweepEvery + 500*time.Millisecond)
	left := leftClaimed(t, c)
	recorded := recordedAnswers(t, c)
	for _, n := range c.nodes {
		n.stop()
	}
	stopSampling()
	stats.settle = time.Since(settleStart)

	h := &history{
		lease: cfg.lease, attempts: hist.snapshot(), records: c.records.snapshot(), effects: c.effects.snapshot(),
		dbRows: dbEffects(t, c), faults: withStalls(in.applied(), stalls.stop()), recorded: recorded, left: left, unsettled: unsettled, end: clk.now(),
		pgSamples: <-samples,
	}
	for _, n := range c.nodes {
		h.instances = append(h.instances, n.name)
		h.crashes = append(h.crashes, n.crashes()...)
	}
	return h, stats
}

func leftClaimed(t *testing.T, c *cluster) []string {
	t.Helper()
	rows, err := c.pool.Query(t.Context(), `SELECT key FROM idem_keys WHERE state <> 'completed' ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, "key/")
	}
	return keys
}

// recordedAnswers reads each completed key's recorded answer: the
// execution its result names.
func recordedAnswers(t *testing.T, c *cluster) map[string]string {
	t.Helper()
	ctx := t.Context()
	store, err := pgstore.New(c.pool, pgstore.Options{NoListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rows, err := c.pool.Query(ctx, `SELECT scope, key FROM idem_keys WHERE state = 'completed'`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Scope []byte
		Key   string
	}
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range all {
		key, err := idem.ParseStoredKey(r.Key)
		if err != nil {
			t.Fatal(err)
		}
		e, ok, err := store.Inspect(ctx, string(r.Scope), key)
		if err != nil || !ok {
			t.Fatalf("inspecting %s: %v (present %v)", r.Key, err, ok)
		}
		if e.Result.Unreplayable {
			out[strings.TrimPrefix(r.Key, "key/")] = recordedUnreplayable
			continue
		}
		out[strings.TrimPrefix(r.Key, "key/")] = answerExec(e.Result.Body)
	}
	return out
}

// recordedUnreplayable is the recorded answer of a key completed as
// unreplayable: no body names its execution.
const recordedUnreplayable = "(unreplayable)"

// answerExec is the execution a recorded body names: a wire.Answer (the
// first JSON value: POST /tx's handler may write more after it), or a
// JSON-RPC response whose tool result is one.
func answerExec(body []byte) string {
	var ans wire.Answer
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&ans); err == nil && ans.Exec != "" {
		return ans.Exec
	}
	var msg struct {
		Result struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &msg); err == nil && len(msg.Result.Content) == 1 {
		if err := json.Unmarshal([]byte(msg.Result.Content[0].Text), &ans); err == nil {
			return ans.Exec
		}
	}
	return "?" + string(body)
}

func dbEffects(t *testing.T, c *cluster) []dbEffect {
	t.Helper()
	rows, err := c.pool.Query(t.Context(), `SELECT key, exec, variant, gen FROM robust_effects ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbEffect])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
