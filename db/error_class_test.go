package db_test

// Tests of the error classification shared by every domain's workers (sql/error/01_class.sql).

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

func TestErrorClass(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	for _, c := range []struct {
		sqlstate *string
		want     string
	}{
		// Transient: trying again may succeed.
		{ptr("08000"), "transient"}, {ptr("08006"), "transient"}, {ptr("08P01"), "transient"},
		{ptr("40001"), "transient"}, {ptr("40P01"), "transient"},
		{ptr("53000"), "transient"}, {ptr("53100"), "transient"}, {ptr("53200"), "transient"}, {ptr("53300"), "transient"},
		{ptr("55P03"), "transient"}, {ptr("57014"), "transient"},
		{ptr("57P01"), "transient"}, {ptr("57P02"), "transient"}, {ptr("57P03"), "transient"},
		{ptr("58000"), "transient"}, {ptr("58030"), "transient"},
		{ptr("40p01"), "transient"}, // PostgreSQL accepts lower case in RAISE ... USING ERRCODE
		// Deterministic: the same input fails the same way.
		{ptr("22001"), "deterministic"}, {ptr("22023"), "deterministic"}, {ptr("22P02"), "deterministic"},
		{ptr("23505"), "deterministic"}, {ptr("23503"), "deterministic"}, {ptr("23514"), "deterministic"},
		{ptr("54000"), "deterministic"}, {ptr("54001"), "deterministic"},
		{ptr("42601"), "deterministic"}, {ptr("42501"), "deterministic"}, {ptr("42P01"), "deterministic"},
		{ptr("40002"), "deterministic"}, {ptr("40003"), "deterministic"},
		{ptr("55000"), "deterministic"}, {ptr("57P04"), "deterministic"}, {ptr("57000"), "deterministic"},
		{ptr("P0001"), "deterministic"}, {ptr("XX000"), "deterministic"},
		{ptr("SLINV"), "deterministic"}, {ptr("SLNFD"), "deterministic"}, {ptr("SPVAL"), "deterministic"},
		{ptr("SPTYP"), "deterministic"}, {ptr("SPSKP"), "deterministic"},
		// Not a SQLSTATE: set aside rather than retried forever.
		{nil, "deterministic"}, {ptr(""), "deterministic"}, {ptr("08"), "deterministic"},
		{ptr("0800"), "deterministic"}, {ptr("080000"), "deterministic"}, {ptr("40P0 "), "deterministic"},
		{ptr("53-00"), "deterministic"},
	} {
		var got string
		require.NoError(t, tx.QueryRow(context.Background(), `SELECT api.error_class($1)`, c.sqlstate).Scan(&got))
		name := "NULL"
		if c.sqlstate != nil {
			name = *c.sqlstate
		}
		require.Equal(t, c.want, got, name)
	}
}

// The rule is readable from psql and matches what api.error_class says.
func TestErrorClassRulesAreTheTransientCodes(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	var bad []string
	rows, err := tx.Query(context.Background(), `
		SELECT r.prefix FROM error_private.transient_rules() r
		WHERE api.error_class(rpad(r.prefix, 5, '0')) <> 'transient' OR length(r.prefix) NOT IN (2, 5)`)
	require.NoError(t, err)
	for rows.Next() {
		var p string
		require.NoError(t, rows.Scan(&p))
		bad = append(bad, p)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, bad)
}
