package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// seriesSeed creates a user, a stream and a series holder at time 1000 with points up to
// deltaTime 42, and returns the holder's id.
func seriesSeed(t *testing.T, q *db.Queries) string {
	t.Helper()
	ctx := context.Background()
	user, err := q.AccountUserCreate(ctx, db.AccountUserCreateParams{Username: "alice", AccessName: "silo"})
	require.NoError(t, err)
	_, err = q.AccountStreamCreate(ctx, db.AccountStreamCreateParams{AccessID: user.AccessID, Stream: json.RawMessage(`{"id": "s", "name": "S"}`)})
	require.NoError(t, err)
	out, err := q.AccountEventCreate(ctx, db.AccountEventCreateParams{AccessID: user.AccessID,
		Event: json.RawMessage(`{"streamId": "s", "type": "series:mass/kg", "time": 1000}`)})
	require.NoError(t, err)
	var e struct{ Event struct{ ID string } }
	require.NoError(t, json.Unmarshal(out, &e))
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: e.Event.ID,
		Data: json.RawMessage(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1], [42, 2]]}`)})
	require.NoError(t, err)
	return e.Event.ID
}

func holderDuration(t *testing.T, q db.DBTX, id string) float64 {
	t.Helper()
	var d float64
	require.NoError(t, q.QueryRow(context.Background(), `SELECT duration FROM account.events WHERE id = $1`, id).Scan(&d))
	return d
}

func TestSeriesMetadataWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	id := seriesSeed(t, db.New(tx))
	w := &SeriesMetadataWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}
	work(t, tx, w, SeriesMetadataArgs{})
	require.Equal(t, 0.0, holderDuration(t, tx, id)) // cooling down
	_, err := tx.Exec(context.Background(), `UPDATE series.pending_updates SET flush_idle = now()`)
	require.NoError(t, err)
	work(t, tx, w, SeriesMetadataArgs{})
	require.Equal(t, 42.0, holderDuration(t, tx, id))
}

// The pending update was written by another connection before this client existed (as before a
// restart): the leader's run on start flushes it.
func TestSeriesMetadataRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(context.Background(), `UPDATE silo.settings SET value = '0 seconds' WHERE key = 'series.cooldown'`)
	require.NoError(t, err)
	id := seriesSeed(t, db.New(pool))
	runOnStart(t, pool, Config{ReaperInterval: -1, PurgeTick: -1}, SeriesMetadataArgs{}.Kind())
	require.Equal(t, 42.0, holderDuration(t, pool, id))
}

func TestSeriesMaintenanceWorker(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	id := seriesSeed(t, db.New(tx))
	_, err := tx.Exec(ctx, `DELETE FROM account.events WHERE id = $1`, id)
	require.NoError(t, err)
	work(t, tx, &SeriesMaintenanceWorker{queries: db.New(tx), logger: slog.New(slog.DiscardHandler)}, SeriesMaintenanceArgs{})
	var points, deletions int
	require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM series.points_all), (SELECT count(*) FROM account.series_deletions)`).Scan(&points, &deletions))
	require.Equal(t, 0, points)
	require.Equal(t, 0, deletions)
}

func TestSeriesMaintenanceRunsOnStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	seriesSeed(t, db.New(pool))
	runOnStart(t, pool, Config{ReaperInterval: -1, PurgeTick: -1}, SeriesMaintenanceArgs{}.Kind())
	var points int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM series.points_all`).Scan(&points))
	require.Equal(t, 2, points) // no retention set: kept
}
