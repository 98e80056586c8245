package server

import (
	"sync"
	"time"

	"github.com/silo-db/silo/db"
)

// identityTTL is how long an authentication is reused without asking the database again: a
// revoked token stops working, and a change of the setting auth.anonymous_reads reaches requests
// without a token, within this time.
const identityTTL = 5 * time.Second

// anonymousKey is the cache key of requests without a token. No token's SHA-256 is all zeros.
var anonymousKey [32]byte

// identityCache keeps recent authentications, keyed by the token's SHA-256, so a busy client costs
// one database round trip per request, not two. It keeps successful ones, and for requests without
// a token the refusal too (anonymous reads are off, the default): a flood of requests without a
// token then costs the database nothing. Unknown tokens are not kept: they would fill the cache.
type identityCache struct {
	mu      sync.Mutex
	entries map[[32]byte]cachedIdentity
}

type cachedIdentity struct {
	id      db.TokenAuthenticateRow
	err     error // the refusal of a request without a token; nil otherwise
	expires time.Time
}

// get returns the cached answer for key, and whether there was a fresh one.
func (c *identityCache) get(key [32]byte, now time.Time) (db.TokenAuthenticateRow, error, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || now.After(e.expires) {
		return db.TokenAuthenticateRow{}, nil, false
	}
	return e.id, e.err, true
}

func (c *identityCache) put(key [32]byte, id db.TokenAuthenticateRow, err error, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) > 10000 {
		c.entries = make(map[[32]byte]cachedIdentity) // bounded: start over rather than grow
	}
	c.entries[key] = cachedIdentity{id: id, err: err, expires: now.Add(identityTTL)}
}
