package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/server"
)

// A path that exists for other methods only answers 405 with Allow and the JSON error; a path no
// route has answers 404, also in JSON.
func TestRoutesMethodNotAllowed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(server.New(server.Config{Version: "test"}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		method, path string
		status       int
		allow, id    string
	}{
		{"GET", "/profile-updates", 405, "POST", "method-not-allowed"},
		{"PUT", "/profile-updates", 405, "POST", "method-not-allowed"},
		{"POST", "/healthz", 405, "GET, HEAD", "method-not-allowed"},
		{"DELETE", "/profiles/customer/42", 405, "GET, HEAD", "method-not-allowed"},
		{"POST", "/profiles/customer/42/grain/a/b", 405, "GET, HEAD", "method-not-allowed"},
		{"GET", "/dead-letters/7/replay", 405, "POST", "method-not-allowed"},
		{"POST", "/dead-letters", 405, "GET, HEAD", "method-not-allowed"},
		{"POST", "/ws", 405, "GET, HEAD", "method-not-allowed"},
		{"GET", "/nope", 404, "", "unknown-resource"},
		{"POST", "/nope", 404, "", "unknown-resource"},
		{"GET", "/profiles/customer", 404, "", "unknown-resource"},
		{"GET", "/", 404, "", "unknown-resource"},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		name := tc.method + " " + tc.path
		require.Equal(t, tc.status, resp.StatusCode, name)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"), name)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), name)
		var e struct {
			Error struct {
				ID      string
				Message string
				Data    struct{ Allow []string }
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(raw, &e), "%s: %s", name, raw)
		require.Equal(t, tc.id, e.Error.ID, name)
		require.Contains(t, e.Error.Message, tc.path, name)
		if tc.status == 405 {
			require.Equal(t, strings.Split(tc.allow, ", "), e.Error.Data.Allow, name)
		}
	}
}

// A path that is not clean is still redirected to the clean one, as the mux does.
func TestRoutesRedirectUncleanPaths(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(server.New(server.Config{Version: "test"}))
	t.Cleanup(srv.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/x/../healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	require.Equal(t, "/healthz", resp.Header.Get("Location"))
}
