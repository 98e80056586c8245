package server

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// The token check of an open websocket: nil for a valid token, change.ErrRevoked (wrapping the
// SLAUT error) for a revoked one, and for the anonymous identity once anonymous reads are off.
func TestChangeWSTokenCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	s := &server{q: db.New(pool)}
	require.ErrorIs(t, s.tokenCheck("")(ctx), change.ErrRevoked)
	_, err := pool.Exec(ctx, `UPDATE silo.settings SET value = 'true' WHERE key = 'auth.anonymous_reads'`)
	require.NoError(t, err)
	require.NoError(t, (&server{q: db.New(pool)}).tokenCheck("")(ctx), "anonymous reads on")

	var valid, gone string
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('valid', '{}', false, false)`).Scan(&valid))
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('gone', '{}', false, false)`).Scan(&gone))
	_, err = pool.Exec(ctx, `SELECT api.token_revoke('gone')`)
	require.NoError(t, err)

	require.NoError(t, s.tokenCheck(valid)(ctx))
	err = s.tokenCheck(gone)(ctx)
	require.ErrorIs(t, err, change.ErrRevoked)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr))
	require.Equal(t, "SLAUT", pgErr.Code)
}
