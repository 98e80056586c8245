package server

import (
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
