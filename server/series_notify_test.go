package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

// Series notifications across two server processes (two servers, each with its own pool and change
// hub, on one database): writes through both, as typed columns and as flatJSON, reach the user's
// websocket subscriber on one of them at most once per series.notify_interval (200 ms by default),
// and every series written is named in a notification in the end (the ones held back are thrown by
// the metadata flush, run here as silo work runs it).
func TestSeriesNotifyTwoProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := []*pgxpool.Pool{dbtest.Pool(t)}
	second, err := pgxpool.NewWithConfig(ctx, pools[0].Config().Copy())
	require.NoError(t, err)
	t.Cleanup(second.Close)
	pools = append(pools, second)
	var srvs []*httptest.Server
	for _, pool := range pools {
		hub := startHub(t, pool)
		awaitHub(t, hub)
		srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	b := &accountBundle{srv: srvs[0]}
	require.NoError(t, pools[0].QueryRow(ctx, `SELECT token FROM api.account_user_create('alice')`).Scan(&b.token))
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/alice/streams", b.token, `{"id": "s", "name": "S"}`).status)
	var events []string
	for range 6 {
		a := b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["s"], "type": "series:mass/kg", "time": 1000}`)
		require.Equal(t, http.StatusCreated, a.status, a.body)
		events = append(events, a.object("event")["id"].(string))
	}

	conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srvs[0].URL, "http")+"/alice/ws", http.Header{"Authorization": {b.token}})
	require.NoError(t, err)
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var ready wsMessage
	require.NoError(t, conn.ReadJSON(&ready))
	require.Equal(t, "ready", ready.Type)

	// Writers: server i writes events i, i+2, i+4 in turn, each body as typed columns or (with a
	// key) as flatJSON, for about a second; a flusher runs the metadata flush as silo work does.
	type write struct {
		event   string
		sent    time.Time
		covered bool
	}
	var mu sync.Mutex
	var writes []write
	var wg sync.WaitGroup
	for i, srv := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &accountBundle{srv: srv, token: b.token}
			for n := range 30 {
				event := events[i+2*(n%3)]
				body := fmt.Sprintf(`{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[%d, %d.5]]}`, n, n)
				h := map[string]string{"Authorization": b.token}
				if n%2 == 1 {
					h["Idempotency-Key"] = fmt.Sprintf("w%d-%d", i, n)
				}
				mu.Lock()
				writes = append(writes, write{event: event, sent: time.Now()})
				mu.Unlock()
				status, _, out := w.raw(t, "POST", "/alice/events/"+event+"/series", h, body)
				if status != http.StatusOK {
					t.Errorf("POST through server %d: %d %s", i, status, out)
					return
				}
				time.Sleep(30 * time.Millisecond)
			}
		}()
	}
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		q := db.New(pools[1])
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := q.SeriesMetadataFlush(ctx, 1000); err != nil {
				t.Errorf("flush: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-flushed
	})
	wg.Wait()

	// Every write is named by a notification thrown after it was sent; notifications are at least
	// the interval apart (by the time each was thrown).
	var times []time.Time
	covered := func() bool {
		for _, w := range writes {
			if !w.covered {
				return false
			}
		}
		return true
	}
	for !covered() {
		var m struct {
			Type, Channel, Kind string
			Payload             struct{ IDs []string }
			Created             time.Time
		}
		require.NoError(t, conn.ReadJSON(&m), "writes not notified: %+v", writes)
		if m.Type != "change" || m.Kind != "series" {
			continue
		}
		require.Equal(t, "account:alice:events", m.Channel)
		for i, w := range writes {
			for _, id := range m.Payload.IDs {
				if id == w.event && !m.Created.Before(w.sent) {
					writes[i].covered = true
				}
			}
		}
		times = append(times, m.Created)
	}
	require.Greater(t, len(times), 1, "writes for a second through two servers make more than one notification")
	for i := 1; i < len(times); i++ {
		require.GreaterOrEqual(t, times[i].Sub(times[i-1]), 200*time.Millisecond, "notifications %d and %d: %v", i-1, i, times)
	}
	raw, _ := json.Marshal(times)
	t.Logf("%d writes, %d notifications, thrown at %s", len(writes), len(times), raw)
}
