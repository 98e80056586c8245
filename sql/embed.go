// Package sql holds Silo's stateless database code: every function, view and trigger of schema
// api, one file per domain. `silo migrate` drops schema api and runs these files in name order
// whenever their content changes.
package sql

import "embed"

// FS holds the sql/*.sql files.
//
//go:embed *.sql
var FS embed.FS
