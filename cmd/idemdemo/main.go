// Command idemdemo is the idem demo service: a small invoice API whose
// POST /invoices is protected by the Idempotency-Key middleware, and an MCP
// endpoint whose create_invoice tool calls that API the way a generated MCP
// server would, forwarding _meta.sessionId as X-Session-Id and the call's
// key, bound to the caller by mcphttp, as X-Idempotency-Key.
//
// Without a database (no -database-url, no DATABASE_URL) it keeps claims and
// invoices in memory. With one it migrates the idem table at start, stores
// claims with pgstore, sweeps abandoned claims and expired results, and
// inserts each invoice in the same transaction that records its response.
//
// Run it with -help for the flags; docs/demo.md walks through it with curl.
package main

import "github.com/idemkit/idem/internal/cmdmain"

func main() { cmdmain.Main("idemdemo", run) }
