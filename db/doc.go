// Package db is Silo's database layer: the sqlc-generated queries (one call of an api.* function
// each), opening a connection pool, migrating (goose migrations, River's migrations, then the
// rebuild of schema api from sql/).
//
// It holds no business rules: those live in the SQL functions.
package db
