package server

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"time"

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

// authenticate returns the identity of token ("" is the anonymous identity): what
// api.token_authenticate says it may read and do, reused from the identity cache while fresh. An
// unknown or revoked token is an SLAUT error.
func (s *server) authenticate(ctx context.Context, token string) (db.TokenAuthenticateRow, error) {
	var tok *string
	var key [32]byte
	now := time.Now()
	if token != "" {
		tok = &token
		key = sha256.Sum256([]byte(token))
		if id, ok := s.identities.get(key, now); ok {
			return id, nil
		}
	}
	id, err := s.q.TokenAuthenticate(ctx, tok)
	if err != nil {
		return id, err
	}
	if tok != nil {
		s.identities.put(key, id, now)
	}
	return id, nil
}

// identity authenticates the request by its token (bearerToken; none is the anonymous identity).
// On failure it answers and returns false.
func (s *server) identity(w http.ResponseWriter, r *http.Request) (db.TokenAuthenticateRow, bool) {
	id, err := s.authenticate(r.Context(), bearerToken(r))
	if err != nil {
		s.fail(w, r, err)
		return id, false
	}
	return id, true
}

// writer requires a token that may write.
func (s *server) writer(w http.ResponseWriter, r *http.Request) bool {
	return s.require(w, r, func(id db.TokenAuthenticateRow) bool { return id.CanWrite }, "this token may not write")
}

// admin requires an admin token.
func (s *server) admin(w http.ResponseWriter, r *http.Request) bool {
	return s.require(w, r, func(id db.TokenAuthenticateRow) bool { return id.IsAdmin }, "this token is not an admin token")
}

func (s *server) require(w http.ResponseWriter, r *http.Request, allowed func(db.TokenAuthenticateRow) bool, denied string) bool {
	id, ok := s.identity(w, r)
	if !ok {
		return false
	}
	if id.TokenID == nil {
		writeError(w, http.StatusUnauthorized, "invalid-access-token", "an access token is required", nil)
		return false
	}
	if !allowed(id) {
		writeError(w, http.StatusForbidden, "forbidden", denied, nil)
		return false
	}
	return true
}
