// Package migrations holds Silo's goose migrations: stateful DDL (schemas, tables, types,
// indexes), and the only code later migrations call, which must exist while sql/ is dropped: the
// functions of schema partition (00015) that make a table time-partitioned. Nothing here depends
// on schema api, which is rebuilt from sql/ on every migrate.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
