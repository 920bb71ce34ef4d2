// Package adapter is what the two adapters, package middleware (HTTP
// Idempotency-Key) and package mcphttp (MCP tools/call), share beyond the
// engine: the key header names and the structured-field parse of the key
// header ([ParseKeyHeader]), the scoping options both declare ([Scoping]),
// the scoper that refuses a request it cannot name and warns once
// ([NewScoper]), and the core of the response writer that captures an answer
// on its way to the client ([CaptureWriter]), with the rules for a client
// that vanished mid-write.
//
// It is not in package engine because all of it is HTTP (headers, response
// writers, credentials); the engine runs work for any adapter. The adapters
// never import each other: each imports this package and exports its own
// name for what a user sees (middleware.KeyHeader, mcphttp.SourceHeader).
package adapter
