package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/db"
)

// GET /{username}/ws: the change notifications of one user, for that user's accesses, as Pryv's
// socket.io namespace /{username} serves them:
//
//	GET /{username}/ws[?auth=<token>][&after=<id>][&channel=<pattern>...][&debounce_ms=<ms>]
//
// The token comes as on the other account routes. The session is GET /ws's (package change), with
// the identity of the access: its readers are the user's reader role {account:<username>}, so it
// sees the changes published on account:<username>:* and nothing else. Without a channel it
// subscribes to account:<username>:* (events and streams). The same connection takes series
// appends under the access's permissions (transport.go: series.append, series.batch).
func (s *server) accountWS(w http.ResponseWriter, r *http.Request) {
	if s.hub == nil || !s.hub.Ready() {
		writeError(w, http.StatusServiceUnavailable, "not-available", "this process does not serve change notifications (yet)", nil)
		return
	}
	username, token := r.PathValue("username"), accountToken(r)
	row, err := s.q.AccountAuthenticate(r.Context(), db.AccountAuthenticateParams{Username: username, Token: &token})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	opts, err := change.ParseQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid-parameters-format", err.Error(), nil)
		return
	}
	if len(opts.Channels) == 0 {
		opts.Channels = []string{"account:" + row.Username + ":*"}
	}
	refusals, err := s.hub.CheckChannels(r.Context(), opts.Channels, false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, f := range refusals {
		if f.ID == change.ErrIDInvalidChannel {
			writeError(w, http.StatusBadRequest, change.ErrIDInvalidChannel, f.Message, map[string]any{"channels": []string{f.Channel}})
			return
		}
	}
	if !websocket.IsWebSocketUpgrade(r) {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", "GET /{username}/ws expects a websocket upgrade", nil)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	s.hub.Serve(conn, change.Identity{Readers: row.Readers, Reauthenticate: s.accountCheck(username, token),
		Requests: s.wsSeriesRequests(row.AccessID), ReadLimit: s.maxBody}, opts)
}

// accountCheck checks again, for a connection that outlives its request, that the access is still
// live: change.ErrRevoked once api.account_authenticate refuses the token.
func (s *server) accountCheck(username, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := s.q.AccountAuthenticate(ctx, db.AccountAuthenticateParams{Username: username, Token: &token})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "SAAUT" || pgErr.Code == "SANFD" || pgErr.Code == "SAHDR") {
			return fmt.Errorf("%w: %w", change.ErrRevoked, err)
		}
		return err
	}
}
