package server_test

// GET /ws at the HTTP level: what is refused before the upgrade, and the route with and without a
// hub. The session protocol itself is tested in package change.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

func TestChangeWSRefusesBadTokensBeforeTheUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	hub := startHub(t, pool)
	srv := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))
	t.Cleanup(srv.Close)
	var reader string
	require.NoError(t, pool.QueryRow(ctx, `SELECT token FROM api.token_create('reader', '{}', false, false)`).Scan(&reader))
	awaitHub(t, hub)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"
	bearer := func(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

	for _, tc := range []struct {
		name, query string
		header      http.Header
		status      int
		errID       string
	}{
		{"unknown token in the header", "", bearer("silo_nope"), 401, "invalid-access-token"},
		{"unknown token in ?auth", "?auth=silo_nope", nil, 401, "invalid-access-token"},
		{"bad after", "?after=-1", bearer(reader), 400, "invalid-parameters-format"},
		{"no token while anonymous reads are off", "", nil, 401, "invalid-access-token"},
		{"bad debounce", "?debounce_ms=x", bearer(reader), 400, "invalid-parameters-format"},
		{"no channel name", "?channel=bogus", bearer(reader), 400, "invalid-parameters-format"},
		{"an empty channel", "?channel=", bearer(reader), 400, "invalid-parameters-format"},
		{"a * in the middle", "?channels=profile:*:x", bearer(reader), 400, "invalid-parameters-format"},
		{"a NUL", "?channel=ops:%00", bearer(reader), 400, "invalid-parameters-format"},
		{"not UTF-8", "?channel=ops:%FF", bearer(reader), 400, "invalid-parameters-format"},
		{"one bad among good ones", "?channels=profile:a:*,bogus,dead-letters", bearer(reader), 400, "invalid-parameters-format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := websocket.DefaultDialer.Dial(url+tc.query, tc.header)
			require.ErrorIs(t, err, websocket.ErrBadHandshake)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			body, _ := io.ReadAll(resp.Body)
			var e struct {
				Error struct {
					ID   string
					Data struct{ Channels []string }
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), string(body))
			require.Equal(t, tc.errID, e.Error.ID)
			if tc.name == "one bad among good ones" {
				// Only the invalid pattern is named: dead-letters is a channel, refused on the connection.
				require.Equal(t, []string{"bogus"}, e.Error.Data.Channels)
			}
		})
	}
	// An over-long channel, named in full in the answer (longer than a websocket client reads of a
	// refused handshake: asked without an upgrade, which is checked after the parameters).
	long := "ops:" + strings.Repeat("x", 1000)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/ws?channel="+long, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+reader)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var e struct {
		Error struct {
			ID   string
			Data struct{ Channels []string }
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	require.Equal(t, "invalid-parameters-format", e.Error.ID)
	require.Equal(t, []string{long}, e.Error.Data.Channels)
	// A valid token, in the header or in ?auth, opens a session; so does none at all once an
	// operator turned anonymous reads on (a server of its own: the refusal above is cached).
	_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = 'true' WHERE key = 'auth.anonymous_reads'`)
	require.NoError(t, err)
	anon := httptest.NewServer(server.New(server.Config{Pool: pool, Version: "test", Hub: hub}))
	t.Cleanup(anon.Close)
	anonURL := "ws" + strings.TrimPrefix(anon.URL, "http") + "/ws"
	for _, tc := range []struct {
		url, query string
		header     http.Header
	}{{url, "", bearer(reader)}, {url, "?auth=" + reader, nil}, {anonURL, "", nil}} {
		conn, resp, err := websocket.DefaultDialer.Dial(tc.url+tc.query, tc.header)
		require.NoError(t, err, tc.query)
		resp.Body.Close()
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		var m struct{ Type string }
		require.NoError(t, conn.ReadJSON(&m))
		require.Equal(t, "ready", m.Type)
		conn.Close()
	}
	// A plain GET is not an upgrade.
	resp, err = http.Get(anon.URL + "/ws")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode)
	// Without a hub the route exists but does not serve.
	plain := httptest.NewServer(server.New(server.Config{Pool: pool}))
	defer plain.Close()
	resp, err = http.Get(plain.URL + "/ws")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
}
