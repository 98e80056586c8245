package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
)

// startHub starts a change hub on pool, as silo serve does, and stops it when the test ends.
func startHub(t *testing.T, pool *pgxpool.Pool) *change.Hub {
	t.Helper()
	ctx := context.Background()
	hub := change.NewHub(change.Config{Pool: pool})
	require.NoError(t, hub.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, hub.Stop(sctx))
	})
	return hub
}

// awaitHub waits until hub listens, so that every change committed afterwards reaches its
// subscribers.
func awaitHub(t *testing.T, hub *change.Hub) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !hub.Ready() {
		require.True(t, time.Now().Before(deadline), "the hub did not get ready")
		time.Sleep(20 * time.Millisecond)
	}
}
