package server

import (
	"net/http"
	"strings"

	"github.com/silo-db/silo/db"
)

// identity authenticates the request by its token (`Authorization: Bearer <token>` or a bare token;
// none is the anonymous identity). api.token_authenticate decides what the token may read. On
// failure it answers and returns false.
func (s *server) identity(w http.ResponseWriter, r *http.Request) (db.TokenAuthenticateRow, bool) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		h = strings.TrimSpace(h[7:])
	}
	var token *string
	if h != "" {
		token = &h
	}
	id, err := s.q.TokenAuthenticate(r.Context(), token)
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
