package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func (b *accountBundle) setting(t *testing.T, key, value string) {
	t.Helper()
	_, err := b.tx.Exec(b.ctx, `UPDATE silo.settings SET value = $2 WHERE key = $1`, key, value)
	require.NoError(t, err)
}

func (b *accountBundle) holderMeta(t *testing.T, id string) (duration float64, modifiedBy string) {
	t.Helper()
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT duration, modified_by FROM account.events WHERE id = $1`, id).Scan(&duration, &modifiedBy))
	return duration, modifiedBy
}

// The seed's merge: the latest author and time, the union of the data extent, the earliest
// deadline and the latest flushIdle.
func TestSeriesMetadataMerge(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "mass/kg")
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[5, 1], [6, 1]]}`))
	// As if the first append had come long ago: an earlier deadline, a flushIdle past, another author.
	_, err := b.tx.Exec(b.ctx, `UPDATE series.pending_updates SET deadline = now() + interval '100 seconds',
		flush_idle = now() - interval '5 seconds', author = 'someone', updated = 1`)
	require.NoError(t, err)
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[3, 1], [4, 1]]}`))
	var author string
	var deadlineS, idleS, minD, maxD float64
	var updatedRecent bool
	require.NoError(t, b.tx.QueryRow(b.ctx, `
		SELECT author, extract(epoch FROM deadline - now()), extract(epoch FROM flush_idle - now()),
		       extract(epoch FROM data_min) - 1000, extract(epoch FROM data_max) - 1000, updated > 2
		FROM series.pending_updates`).Scan(&author, &deadlineS, &idleS, &minD, &maxD, &updatedRecent))
	require.Equal(t, b.personal, author)
	require.Equal(t, 100.0, deadlineS) // earliest deadline wins (not now + 300 s)
	require.Equal(t, 10.0, idleS)      // latest flushIdle wins: now + cooldown
	require.Equal(t, 3.0, minD)
	require.Equal(t, 6.0, maxD)
	require.True(t, updatedRecent)
}

// Merging a write into its series' pending update rewrites the row in place (a HOT update: no
// index entry is written), as every write of a series does.
func TestSeriesPendingUpdateMergedInPlace(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "mass/kg")
	// The transaction's counts (the backend's not yet reported, which may hold earlier
	// transactions' too: hence the difference).
	counts := func() (updates, hot int64) {
		require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE relid = 'series.pending_updates'::regclass`).Scan(&updates, &hot))
		return updates, hot
	}
	u0, h0 := counts()
	for i := range 3 {
		// A longer cooldown each time, so that each merge moves flush_idle as later writes do.
		b.setting(t, "series.cooldown", fmt.Sprintf("%d seconds", 10+i))
		require.NoError(t, b.seriesAppend(t, b.personal, id, fmt.Sprintf(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[%d, 1]]}`, i)))
	}
	var idle float64
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT extract(epoch FROM flush_idle - now()) FROM series.pending_updates`).Scan(&idle))
	require.Equal(t, 12.0, idle)
	u1, h1 := counts()
	require.Equal(t, int64(2), u1-u0)
	require.Equal(t, int64(2), h1-h0)
}

// Cooldown and staleLimit decide when an update is flushed; the duration only grows; modifiedBy
// is the access id.
func TestSeriesMetadataFlush(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "mass/kg")
	sensor, err := b.app(t, b.personal, `{"name": "sensor", "permissions": [{"streamId": "heart", "level": "create-only"}]}`)
	require.NoError(t, err)
	flush := func() int32 {
		n, err := b.q.SeriesMetadataFlush(b.ctx, 1000)
		require.NoError(t, err)
		return n
	}
	require.NoError(t, b.seriesAppend(t, sensor, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[10.5, 1]]}`))
	require.Equal(t, int32(0), flush()) // cooling down (10 s), far from stale (300 s)
	d, by := b.holderMeta(t, id)
	require.Equal(t, 0.0, d)
	require.Equal(t, b.personal, by)

	b.setting(t, "series.cooldown", "0 seconds")
	require.NoError(t, b.seriesAppend(t, sensor, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[2, 1]]}`))
	require.Equal(t, int32(0), flush()) // the earlier flushIdle (now + 10 s) wins over the later append's
	_, err = b.tx.Exec(b.ctx, `UPDATE series.pending_updates SET flush_idle = now()`)
	require.NoError(t, err)
	require.Equal(t, int32(1), flush())
	d, by = b.holderMeta(t, id)
	require.Equal(t, 10.5, d)
	require.Equal(t, sensor, by)
	require.Equal(t, int32(0), flush()) // flushed once

	// An append that does not reach further keeps the duration.
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[4, 1]]}`))
	require.Equal(t, int32(1), flush())
	d, by = b.holderMeta(t, id)
	require.Equal(t, 10.5, d)
	require.Equal(t, b.personal, by)

	// staleLimit: flushed however long the cooldown.
	b.setting(t, "series.cooldown", "1 hour")
	b.setting(t, "series.stale_limit", "0 seconds")
	require.NoError(t, b.seriesAppend(t, sensor, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[20, 1]]}`))
	require.Equal(t, int32(1), flush())
	d, _ = b.holderMeta(t, id)
	require.Equal(t, 20.0, d)

	// A holder deleted meanwhile: its update is dropped.
	b.setting(t, "series.stale_limit", "300 seconds")
	require.NoError(t, b.seriesAppend(t, sensor, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[30, 1]]}`))
	_, err = b.tx.Exec(b.ctx, `DELETE FROM account.events WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `UPDATE series.pending_updates SET flush_idle = now()`)
	require.NoError(t, err)
	require.Equal(t, int32(0), flush())
	var left int
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM series.pending_updates`).Scan(&left))
	require.Equal(t, 0, left)
}

// Series notifications are debounced per user across transactions (as from two processes): the
// first append publishes, one within the interval waits, and the flush publishes it once the
// interval has passed.
func TestSeriesNotifyDebounce(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	q := db.New(pool)
	user, err := q.AccountUserCreate(ctx, db.AccountUserCreateParams{Username: "alice", AccessName: "silo"})
	require.NoError(t, err)
	_, err = q.AccountStreamCreate(ctx, db.AccountStreamCreateParams{AccessID: user.AccessID, Stream: json.RawMessage(`{"id": "s", "name": "S"}`)})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = '1 hour' WHERE key = 'series.notify_interval'`)
	require.NoError(t, err)
	var ids []string
	for range 2 {
		out, err := q.AccountEventCreate(ctx, db.AccountEventCreateParams{AccessID: user.AccessID, Event: json.RawMessage(`{"streamId": "s", "type": "series:mass/kg"}`)})
		require.NoError(t, err)
		var e struct{ Event struct{ ID string } }
		require.NoError(t, json.Unmarshal(out, &e))
		ids = append(ids, e.Event.ID)
	}
	published := func() []string {
		var p []string
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT coalesce(array_agg(payload::text ORDER BY payload::text), '{}') FROM (
				SELECT payload FROM change_private.outbox WHERE kind = 'series'
				UNION ALL SELECT payload FROM silo.changes WHERE kind = 'series') x`).Scan(&p))
		return p
	}
	body := json.RawMessage(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1]]}`)
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: ids[0], Data: body})
	require.NoError(t, err)
	require.Equal(t, []string{`{"ids": ["` + ids[0] + `"]}`}, published())
	// Another connection, as another process: held back.
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: ids[1], Data: body})
	require.NoError(t, err)
	_, err = q.SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: ids[0], Data: body})
	require.NoError(t, err)
	require.Len(t, published(), 1)
	_, err = q.SeriesMetadataFlush(ctx, 1000)
	require.NoError(t, err)
	require.Len(t, published(), 1) // the interval has not passed
	_, err = pool.Exec(ctx, `UPDATE series.notify_throttle SET published = now() - interval '2 hours'`)
	require.NoError(t, err)
	_, err = q.SeriesMetadataFlush(ctx, 1000)
	require.NoError(t, err)
	want := []string{`{"ids": ["` + ids[0] + `"]}`}
	both := `{"ids": ["` + ids[0] + `", "` + ids[1] + `"]}`
	if ids[1] < ids[0] {
		both = `{"ids": ["` + ids[1] + `", "` + ids[0] + `"]}`
	}
	want = append(want, both)
	got := published()
	require.ElementsMatch(t, want, got)
}
