// Package sql holds Silo's stateless database code: schema api, the public contract (what HTTP,
// the workers and psql users call), and each domain's private schema <domain>_private (its helpers
// and trigger functions), one folder per domain. `silo migrate` drops api and every *_private schema
// and runs api.sql, then the folders of Domains in that order, each folder's files in name order,
// in one transaction, whenever this code changes. Tables live in migrations/, never here.
package sql

import "embed"

// FS holds api.sql and the <domain>/NN_<stage>.sql files.
//
//go:embed api.sql */*.sql
var FS embed.FS

// Domains lists the domain folders in the order they are run. A domain comes after the domains
// whose functions its SQL-language functions and views call (PostgreSQL checks those bodies when
// they are created); PL/pgSQL bodies are checked when they run, and by the SQL lint of the tests.
var Domains = []string{"error", "settings", "partition", "auth", "change", "idempotency", "profile", "account", "series", "event", "belt", "ods", "purge", "cache", "job"}
