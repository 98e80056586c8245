package db_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// Schema api is the public contract: every function's COMMENT names each SQLSTATE its body raises,
// and no comment calls the function internal (internals live in the <domain>_private schemas).
func TestAPICommentsAreContracts(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	rows, err := tx.Query(context.Background(), `
		SELECT p.oid::regprocedure::text, p.prosrc, coalesce(obj_description(p.oid, 'pg_proc'), '')
		FROM pg_proc p
		WHERE p.pronamespace = 'api'::regnamespace
		ORDER BY 1`)
	require.NoError(t, err)
	type fn struct{ name, src, comment string }
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		return f, r.Scan(&f.name, &f.src, &f.comment)
	})
	require.NoError(t, err)
	require.NotEmpty(t, fns)
	code := regexp.MustCompile(`ERRCODE\s*=\s*'([0-9A-Z]{5})'`)
	for _, f := range fns {
		require.False(t, strings.HasPrefix(strings.ToLower(f.comment), "internal"), "%s is commented as internal: move it to its domain's private schema", f.name)
		for _, m := range code.FindAllStringSubmatch(f.src, -1) {
			require.Contains(t, f.comment, m[1], "%s raises %s, which its COMMENT does not name", f.name, m[1])
		}
	}
}

// Optional arguments have defaults, so a psql user can name only the ones that matter.
func TestAPINamedArguments(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	_, err := tx.Exec(ctx, `SELECT api.profile_apply_batch('[{"_id": "named", "_path": ["a"], "_value": {"_v": 1}}]')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM api.profile_dead_letter_list(p_resolved => false)`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM api.profile_dead_letter_list(p_correlation_id => 'named', p_limit => 5)`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM api.profile_dead_letter_list(p_resolved => true)`).Scan(&n))
	require.Equal(t, 0, n)
}
