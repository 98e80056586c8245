package change_test

// Tests of the hub against the real PostgreSQL: the listener's reconnection, polling without
// writer notifications, shutdown, many clients at once, and a hub behind the change log's
// retention.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
)

// The listener survives the loss of its connection: it listens again and catches up.
func TestHubListenerReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
	c := b.dial(t, "?channels=profile:lst:*", bearer(b.reader))
	c.nextType("ready")
	c.nextType("subscribed")
	var killed int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'silo change listener'`).Scan(&killed))
	require.Equal(t, 1, killed)
	b.apply(t, `{"_id":"x","_profile_type":"lst","_path":["a"],"_value":{"_v":"1"}}`)
	require.Equal(t, "profile:lst:x", c.nextType("change").Channel)
}

// Stopping the hub closes every connection with 1001 and the id to resume from.
func TestHubShutdownTellsWhereToResume(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
	c := b.dial(t, "?channels=profile:sd:*", bearer(b.reader))
	c.nextType("ready")
	c.nextType("subscribed")
	b.apply(t, `{"_id":"x","_profile_type":"sd","_path":["a"],"_value":{"_v":"1"}}`)
	id := c.nextType("change").ID
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, b.hub.Stop(ctx))
	_, _, err := c.conn.ReadMessage()
	var closeErr *websocket.CloseError
	require.ErrorAs(t, err, &closeErr)
	require.Equal(t, websocket.CloseGoingAway, closeErr.Code)
	require.Equal(t, fmt.Sprintf("server shutting down: resume with after=%d", id), closeErr.Text)
	require.False(t, b.hub.Ready())
}

// Many clients on one channel, subscribing and leaving while changes flow: every client that
// stays receives everything after its position (a race detector workout for the hub).
func TestHubManyClients(t *testing.T) {
	t.Parallel()
	b := setup(t, change.Config{}, false)
	start := b.hub.LastID()
	const n = 20
	var wg sync.WaitGroup
	got := make([][]int64, n)
	var final []int64
	finalReady := make(chan struct{})
	for i := range n {
		c := b.dial(t, fmt.Sprintf("?channels=profile:many:*&after=%d", start), bearer(b.reader))
		c.nextType("ready")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_ = c.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, data, err := c.conn.ReadMessage()
				if err != nil {
					t.Error(err)
					return
				}
				var m wsMsg
				if err := json.Unmarshal(data, &m); err != nil {
					t.Error(err)
					return
				}
				if m.Type != "change" {
					continue
				}
				got[i] = append(got[i], m.ID)
				select {
				case <-finalReady:
					if len(got[i]) >= len(final) {
						return
					}
				default:
				}
			}
		}()
	}
	for i := range 30 {
		b.apply(t, fmt.Sprintf(`{"_id":"c%d","_profile_type":"many","_path":["a"],"_value":{"_v":"1"}}`, i))
	}
	final = b.expectedIDs(t, "profile:many:", start, nil)
	close(finalReady)
	// The last change wakes every reader that was waiting.
	b.apply(t, `{"_id":"zz","_profile_type":"many","_path":["a"],"_value":{"_v":"1"}}`)
	wg.Wait()
	for i := range n {
		require.Equal(t, final, got[i][:len(final)], "client %d", i)
	}
}

// With silo.change_notify off for the database, writers do not notify and the hub finds their
// changes by polling.
func TestHubWithoutWriterNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, change.Config{}, false, func(pool *pgxpool.Pool) {
		_, err := pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET silo.change_notify = off', current_database()); END $$`)
		require.NoError(t, err)
	})
	c := b.dial(t, "?channels=profile:quiet:*", bearer(b.reader))
	c.nextType("ready")
	c.nextType("subscribed")
	for i := range 3 {
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SET LOCAL silo.change_notify = off`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT api.profile_apply_batch($1)`, fmt.Sprintf(`{"_id":"q%d","_profile_type":"quiet","_path":["a"],"_value":{"_v":"1"}}`, i))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, fmt.Sprintf("profile:quiet:q%d", i), c.nextType("change").Channel)
	}
}

// When the log was trimmed past what the hub has fanned out (it could not read for longer than the
// retention), every client is disconnected and, resuming, told what it missed.
func TestHubBehindTheRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, change.Config{}, false)
	c := b.dial(t, "?channels=profile:gap:*", bearer(b.reader))
	position := c.nextType("ready").Position
	c.nextType("subscribed")
	// Changes the hub never saw, already trimmed, and one after them.
	for _, q := range []string{
		`INSERT INTO silo.changes (id, channel, kind, payload, readers, created) VALUES ($1 + 10, 'profile:gap:x', 'changed', '{}', '{_all}', now())`,
		`UPDATE silo.change_horizon SET trimmed_through = $1 + 5`,
		`SELECT setval('silo.change_id_seq', $1 + 10)`,
		`SELECT pg_notify('silo_changes', ($1 + 10)::text)`,
	} {
		_, err := b.pool.Exec(ctx, q, position)
		require.NoError(t, err)
	}
	_, _, err := c.conn.ReadMessage()
	var closeErr *websocket.CloseError
	require.ErrorAs(t, err, &closeErr)
	require.Equal(t, 4002, closeErr.Code)
	require.Equal(t, fmt.Sprintf("server behind: resume with after=%d", position), closeErr.Text)

	c = b.dial(t, fmt.Sprintf("?channels=profile:gap:*&after=%d", position), bearer(b.reader))
	m := c.nextType("expired")
	require.Equal(t, []any{position, position + 5, "expired"}, []any{m.After, m.ResumeAfter, m.Cause})
	c.nextType("ready")
	require.Equal(t, position+10, c.nextType("change").ID)
}
