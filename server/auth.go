package server

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/silo-db/silo/db"
)

// identityTTL is how long an authenticated identity is reused without asking the database again:
// a revoked token stops working within this time.
const identityTTL = 5 * time.Second

// identityCache keeps recent successful authentications, keyed by the token's SHA-256, so a busy
// client costs one database round trip per request, not two.
type identityCache struct {
	mu      sync.Mutex
	entries map[[32]byte]cachedIdentity
}

type cachedIdentity struct {
	id      db.TokenAuthenticateRow
	expires time.Time
}

func (c *identityCache) get(key [32]byte, now time.Time) (db.TokenAuthenticateRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || now.After(e.expires) {
		return db.TokenAuthenticateRow{}, false
	}
	return e.id, true
}

func (c *identityCache) put(key [32]byte, id db.TokenAuthenticateRow, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > 10000 {
		c.entries = make(map[[32]byte]cachedIdentity) // bounded: start over rather than grow
	}
	c.entries[key] = cachedIdentity{id: id, expires: now.Add(identityTTL)}
}

// identity authenticates the request by its token (`Authorization: Bearer <token>` or a bare token;
// none is the anonymous identity). api.token_authenticate decides what the token may read. On
// failure it answers and returns false.
func (s *server) identity(w http.ResponseWriter, r *http.Request) (db.TokenAuthenticateRow, bool) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		h = strings.TrimSpace(h[7:])
	}
	var token *string
	var key [32]byte
	now := time.Now()
	if h != "" {
		token = &h
		key = sha256.Sum256([]byte(h))
		if id, ok := s.identities.get(key, now); ok {
			return id, true
		}
	}
	id, err := s.q.TokenAuthenticate(r.Context(), token)
	if err != nil {
		s.fail(w, r, err)
		return id, false
	}
	if token != nil {
		s.identities.put(key, id, now)
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
