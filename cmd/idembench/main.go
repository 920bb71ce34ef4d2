// Command idembench measures what idempotency costs, side by side, in one
// process and against one PostgreSQL database.
//
// It starts an HTTP service in-process on 127.0.0.1 (an ephemeral port), with
// the same small handler (201 and a JSON body) mounted bare and behind the
// Idempotency-Key middleware over pgstore, and drives it over loopback with a
// keep-alive client for a fixed duration per mode:
//
//	floor       the database work of a first request without idem: the two
//	            writes pgstore makes (insert the claim, update it to
//	            completed) as the plainest SQL through pgx, with no
//	            existing-row check, no notification: what PostgreSQL costs
//	http-floor  floor's work in a handler of the same server, through the
//	            same client, without idem: what PostgreSQL and HTTP cost
//	store       pgstore Claim + Complete straight through pgx, no HTTP
//	http-bare   the handler without middleware: what HTTP itself costs
//	unique      a new Idempotency-Key per request: claim, handler, complete
//	replay      a fixed set of completed keys, requested again and again
//	mixed       a -retry-share fraction of requests reuse a recent key
//	demo-floor  the demo's database work without idem: the claim, then
//	            BEGIN; INSERT invoice; UPDATE to completed; COMMIT
//	http-demo-floor
//	            demo-floor's work behind the same HTTP server, without idem
//	demo        the demo's POST /invoices on the two-phase path, over HTTP:
//	            claim, then the invoice and the recorded response in one
//	            transaction (CompleteTx)
//	http-insert the invoice alone behind the same HTTP server, without
//	            idempotency: BEGIN; INSERT invoice; COMMIT
//	http-onetx-floor
//	            one commit by hand behind the same server, without idem: the
//	            claim sent with BEGIN, the invoice, the completion sent with
//	            COMMIT
//	http-minimum
//	            the bare minimum of any durable dedupe by hand, behind the
//	            same server: the invoice and one key row holding its answer,
//	            in one commit (BEGIN with the invoice, the row with COMMIT)
//	demo-onetx  the demo's POST /invoices on the one-commit path: the claim,
//	            the invoice and the response in one transaction
//	            (middleware.Options.InTransaction)
//	demo-onetx-sql
//	            demo-onetx with the invoice inserted through database/sql, on
//	            the claim's *sql.Tx (pgstore.SQLTxFrom)
//	wait        not a throughput mode: the time from a completion's commit
//	            to its waiters' wake, with -instances stores (each its own
//	            pool and LISTEN connection) and -waiters waiters per key, on
//	            the two-phase path (waiters notified) and on the one-commit
//	            path (waiters blocked in PostgreSQL on the key's lock)
//
// The doors' modes run the invoice insert (http-insert's work) through each
// door other than net/http, beside the same work through the same
// transport without idem; "-mode doors" runs them all:
//
//	call-bare   the insert as a plain function call, without idem
//	call        idemcall.Do with a new key, two-phase
//	call-onetx  idemcall.Do with a new key, the insert in the claim's
//	            transaction
//	call-replay idemcall.Do of a fixed set of completed keys
//	grpc-bare   a unary grpc-go call over loopback, without the interceptor
//	grpc        the same call through idemgrpc, a new key per call
//	grpc-replay the same call through idemgrpc, completed keys
//	connect-bare, connect, connect-replay
//	            the same for a Connect procedure (idemconnect) over HTTP/1.1
//
// "-mode all" runs every mode but wait (and the doors') back to back at the same concurrency
// on the same database and prints a table with three ratio columns: against
// the same work without HTTP (unique/floor, demo/demo-floor) or, for
// replays, without idem (replay/http-bare); against the same work by hand
// behind the same HTTP server (unique/http-floor, demo/http-demo-floor,
// demo-onetx/http-onetx-floor: what idem alone costs); and the invoice
// modes against http-insert (what idempotency costs the service);
// "-mode all,wait" adds the wait table. -csv FILE also writes every
// measurement as a row "series,clients,instances,metric,value,unit". Without
// -table it creates a schema of its own (idembench_<random>), migrates it,
// and drops it at the end. Each mode is warmed up for -warmup, then the modes
// take turns in -rounds slices of -duration, so that the load of a shared
// machine falls on all of them alike; every run stops by itself. The store's
// replay cache (pgstore.Options.ReplayCacheBytes) is on with -replay-cache
// bytes (64 MiB by default); -replay-cache 0 measures without it.
//
// Usage:
//
//	idembench -mode all -concurrency 16 -duration 10s -csv bench.csv
//	idembench -mode wait -instances 1,3 -waiters 0,1,8 -duration 5s
//	idembench -mode all -replay-cache 0
//	idembench -mode unique -rounds 1 -cpuprofile cpu.pprof -memprofile mem.pprof
//	idembench -mode doors -concurrency 8 -duration 10s
//
// See docs/performance.md ("Load tool") for the method and the numbers.
package main

import "github.com/idemkit/idem/internal/cmdmain"

func main() { cmdmain.Main("idembench", run) }
