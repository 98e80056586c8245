package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/change"
)

// GET /ws: change notifications over a websocket. Package change has the session protocol; this
// handler only opens it:
//
//	GET /ws[?auth=<token>][&after=<id>][&channel=<pattern>...|&channels=<p1>,<p2>][&debounce_ms=<ms>]
//
// The token comes from the Authorization header, as for the HTTP API, or from ?auth= (browsers
// cannot set headers on a websocket); none is the anonymous identity (readers _all). A bad token
// is refused with 401 and bad parameters with 400, before the upgrade: a channel pattern that is
// no channel pattern (change.Hub.CheckChannels) too, naming every such pattern in data.channels. A
// channel the token may never read (dead-letters without admin) is answered on the connection, as
// for a subscribe message.

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 4096,
	// Idle connections hold no write buffer.
	WriteBufferPool: &sync.Pool{},
	// Silo authenticates by token, never by cookie: a page from another origin can do nothing
	// with a websocket that it could not do with the token itself.
	CheckOrigin: func(*http.Request) bool { return true },
}

// changeWS authenticates the token, checks the request, upgrades it and hands the connection to
// the hub, which serves it until it closes.
func (s *server) changeWS(w http.ResponseWriter, r *http.Request) {
	if s.hub == nil || !s.hub.Ready() {
		writeError(w, http.StatusServiceUnavailable, "not-available", "this process does not serve change notifications (yet)", nil)
		return
	}
	token := bearerToken(r)
	if token == "" {
		token = strings.TrimSpace(r.URL.Query().Get("auth"))
	}
	id, err := s.authenticate(r.Context(), token)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	opts, err := change.ParseQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid-parameters-format", err.Error(), nil)
		return
	}
	if len(opts.Channels) > 0 {
		refusals, err := s.hub.CheckChannels(r.Context(), opts.Channels, id.IsAdmin)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		var names, msgs []string
		var hint string
		for _, f := range refusals {
			if f.ID == change.ErrIDInvalidChannel {
				names, msgs = append(names, f.Channel), append(msgs, f.Message)
				hint = cmp.Or(hint, f.Hint)
			}
		}
		if len(names) > 0 {
			data := map[string]any{"channels": names}
			if hint != "" {
				data["hint"] = hint
			}
			writeError(w, http.StatusBadRequest, change.ErrIDInvalidChannel, strings.Join(msgs, "; "), data)
			return
		}
	}
	if !websocket.IsWebSocketUpgrade(r) {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", "GET /ws expects a websocket upgrade", nil)
		return
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	s.hub.Serve(conn, change.Identity{Readers: id.Readers, Admin: id.IsAdmin, Reauthenticate: s.tokenCheck(token),
		Requests: wsSeriesElsewhere()}, opts)
}

// tokenCheck checks again, for a connection that outlives its request, that token is valid (the
// identity cache answers while fresh): change.ErrRevoked once api.token_authenticate refuses it
// (SLAUT), another error when it could not be checked. The anonymous identity is checked too: a
// session opened while anonymous reads were on ends when an operator turns them off.
func (s *server) tokenCheck(token string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := s.authenticate(ctx, token)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "SLAUT" {
			return fmt.Errorf("%w: %w", change.ErrRevoked, err)
		}
		return err
	}
}
