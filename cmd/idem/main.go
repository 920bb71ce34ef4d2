// Command idem is the operator's CLI for an idem table in PostgreSQL:
//
//	idem migrate up|down|status    create, roll back or show the schema
//	idem sweep [--once]            release abandoned claims, delete expired results
//	idem stats                     counts by state, oldest claims, table size
//	idem keys [--scope S]          the most recent keys: scope, key, digest, endpoint, caller, state
//	idem scope --route R -H ...    the scope of a request, from its credentials and route
//	idem inspect --key K           show a key in every scope: its claim or recorded result
//	idem digest --key K            the digest log lines name a key by, and back (inspect --digest)
//	idem forget --scope S --key K  delete one key (a result or a live claim needs --force)
//	idem release --scope S --key K release a stuck claim, never a result
//
// It connects to DATABASE_URL (or --database-url) and works on the table
// named by --table (default idem_keys). Every command takes --help.
package main

import "github.com/idemkit/idem/internal/cmdmain"

func main() { cmdmain.Main("idem", run) }
