// Package adapter is what the two adapters, package middleware (HTTP
// Idempotency-Key) and package mcphttp (MCP tools/call), share beyond the
// engine: the key header names and the structured-field parse of the key
// header ([ParseKeyHeader]), the options they both declare with one
// defaults-and-validation step ([Common]), the scoper that refuses a
// request it cannot name and warns once ([Scoper]), and the core of the
// response writer that captures an answer on its way to the client
// ([Capture]), with the rules for a client that vanished mid-write.
//
// It lives here, not in package engine, because all of it is about HTTP
// (headers, response writers, credentials), and the engine runs protected
// work for any adapter without knowing the transport. The adapters never
// import each other: each imports this package, and each exports its own
// name for what a user sees (middleware.KeyHeader, mcphttp.SourceHeader).
package adapter
