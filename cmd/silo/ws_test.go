package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// Two `silo serve` processes on one database: a write through one reaches a websocket client of
// the other (LISTEN/NOTIFY, one sequencer at a time); when that process stops, its client is told
// where to resume, resumes on the other process and misses nothing.
func TestWebsocketAcrossTwoProcesses(t *testing.T) {
	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var token string
	require.NoError(t, conn.QueryRow(ctx, `SELECT token FROM api.token_create('two', '{}', true, false)`).Scan(&token))

	type proc struct {
		addr string
		cmd  *exec.Cmd
		done chan struct{} // closed when the process has exited; err is its exit
		err  error
	}
	start := func() *proc {
		p := &proc{addr: freeAddr(t), done: make(chan struct{})}
		p.cmd = exec.Command(bin, "serve")
		p.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "SILO_ADDR="+p.addr, "SILO_LOG_LEVEL=warn", "SILO_MQTT_ADDR=off")
		p.cmd.Stderr = os.Stderr
		require.NoError(t, p.cmd.Start())
		go func() {
			p.err = p.cmd.Wait()
			close(p.done)
		}()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			<-p.done
		})
		// Ready when GET /ws with a token is refused for not being an upgrade (400) rather than 503.
		deadline := time.Now().Add(60 * time.Second)
		for {
			req, err := http.NewRequest(http.MethodGet, "http://"+p.addr+"/ws", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusBadRequest {
					return p
				}
			}
			require.True(t, time.Now().Before(deadline), "silo serve on %s did not get ready", p.addr)
			time.Sleep(100 * time.Millisecond)
		}
	}
	a, b := start(), start()

	post := func(p *proc, body string) {
		t.Helper()
		req, err := http.NewRequest("POST", "http://"+p.addr+"/profile-updates", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	type msg struct {
		Type    string         `json:"type"`
		ID      int64          `json:"id"`
		Channel string         `json:"channel"`
		Payload map[string]any `json:"payload"`
	}
	read := func(c *websocket.Conn) (msg, error) {
		var m msg
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, err := c.ReadMessage()
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		return m, err
	}
	dial := func(p *proc, query string) *websocket.Conn {
		c, resp, err := websocket.DefaultDialer.Dial("ws://"+p.addr+"/ws?auth="+token+query, nil)
		require.NoError(t, err)
		resp.Body.Close()
		t.Cleanup(func() { c.Close() })
		for _, want := range []string{"ready", "subscribed"} {
			m, err := read(c)
			require.NoError(t, err)
			require.Equal(t, want, m.Type)
		}
		return c
	}

	onB := dial(b, "&channels=profile:two:*")
	onA := dial(a, "&channels=profile:two:*")
	post(a, `{"_id":"x","_profile_type":"two","_path":["via-a"],"_value":{"_v":"1"}}`)
	post(b, `{"_id":"x","_profile_type":"two","_path":["via-b"],"_value":{"_v":"1"}}`)
	for _, c := range []*websocket.Conn{onB, onA} {
		var paths []any
		var last int64
		for len(paths) < 2 {
			m, err := read(c)
			require.NoError(t, err)
			require.Equal(t, "change", m.Type)
			require.Greater(t, m.ID, last)
			last = m.ID
			paths = append(paths, m.Payload["paths"].([]any)...)
		}
		require.Equal(t, []any{"/via-a", "/via-b"}, paths)
	}

	// B stops: its client is told where to resume, and resumes on A.
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	_, err = read(onB)
	var closeErr *websocket.CloseError
	require.ErrorAs(t, err, &closeErr)
	require.Equal(t, websocket.CloseGoingAway, closeErr.Code)
	after, ok := strings.CutPrefix(closeErr.Text, "server shutting down: resume with after=")
	require.True(t, ok, closeErr.Text)
	select {
	case <-b.done:
		require.NoError(t, b.err, "silo serve must exit cleanly on SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("silo serve did not stop on SIGTERM")
	}
	post(a, `{"_id":"x","_profile_type":"two","_path":["while-away"],"_value":{"_v":"1"}}`)
	c, resp, err := websocket.DefaultDialer.Dial(fmt.Sprintf("ws://%s/ws?auth=%s&channels=profile:two:*&after=%s", a.addr, token, after), nil)
	require.NoError(t, err)
	resp.Body.Close()
	defer c.Close()
	m, err := read(c)
	require.NoError(t, err)
	require.Equal(t, "ready", m.Type)
	// The change comes from the log (replay) or, when the sequencer had not numbered it yet at the
	// time of the replay, live right after "subscribed": either way it arrives.
	for m, err = read(c); err == nil && m.Type == "subscribed"; m, err = read(c) {
	}
	require.NoError(t, err)
	require.Equal(t, "change", m.Type)
	require.Equal(t, []any{"/while-away"}, m.Payload["paths"])
}
