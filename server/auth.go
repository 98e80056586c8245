package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/db"
)

// bearerToken is the request's token: `Authorization: Bearer <token>` or a bare token; "" when
// there is none.
func bearerToken(r *http.Request) string {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		h = strings.TrimSpace(h[7:])
	}
	return h
}

// authenticate returns the identity of token: what api.token_authenticate says it may read and
// do, reused from the identity cache while fresh. "" is a request without a token: refused with
// SLAUT unless anonymous reads are on (silo.settings auth.anonymous_reads), the anonymous identity
// (readers _all) when they are; the answer, refusal included, is cached like a token's, so a change
// of the setting takes effect within identityTTL. An unknown or revoked token is an SLAUT error.
// Every route authenticates here, GET /ws included, so the rule holds for websockets too.
func (s *server) authenticate(ctx context.Context, token string) (db.TokenAuthenticateRow, error) {
	var tok *string
	key := anonymousKey
	now := time.Now()
	if token != "" {
		tok = &token
		key = sha256.Sum256([]byte(token))
	}
	if id, err, ok := s.identities.get(key, now); ok {
		return id, err
	}
	id, err := s.q.TokenAuthenticate(ctx, tok)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		s.identities.put(key, id, nil, now)
	case tok == nil && errors.As(err, &pgErr) && pgErr.Code == "SLAUT":
		s.identities.put(key, id, err, now)
	}
	return id, err
}

// identity authenticates the request by its token (bearerToken; see authenticate for a request
// without one). On failure it answers and returns false.
func (s *server) identity(w http.ResponseWriter, r *http.Request) (db.TokenAuthenticateRow, bool) {
	id, err := s.authenticate(r.Context(), bearerToken(r))
	if err != nil {
		s.fail(w, r, err)
		return id, false
	}
	return id, true
}

// writer requires a token that may write, and returns its identity: what the token may read
// limits what the results of its writes tell (api.profile_apply_batch's p_readers).
func (s *server) writer(w http.ResponseWriter, r *http.Request) (db.TokenAuthenticateRow, bool) {
	return s.require(w, r, func(id db.TokenAuthenticateRow) bool { return id.CanWrite }, "this token may not write")
}

// admin requires an admin token.
func (s *server) admin(w http.ResponseWriter, r *http.Request) bool {
	_, ok := s.require(w, r, func(id db.TokenAuthenticateRow) bool { return id.IsAdmin }, "this token is not an admin token")
	return ok
}

func (s *server) require(w http.ResponseWriter, r *http.Request, allowed func(db.TokenAuthenticateRow) bool, denied string) (db.TokenAuthenticateRow, bool) {
	id, ok := s.identity(w, r)
	if !ok {
		return id, false
	}
	if id.TokenID == nil {
		writeError(w, http.StatusUnauthorized, "invalid-access-token", "an access token is required", nil)
		return id, false
	}
	if !allowed(id) {
		writeError(w, http.StatusForbidden, "forbidden", denied, nil)
		return id, false
	}
	return id, true
}
