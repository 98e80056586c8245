// Package migrations holds Silo's goose migrations: stateful DDL only (schemas, tables, types,
// indexes). Nothing here depends on schema api, which is rebuilt from sql/ on every migrate.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
