package change

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/silo-db/silo/db"
)

// The fan-out index: which clients subscribe to which channel patterns. Exact channels and
// prefixes (a pattern ending in *) are indexed apart, so a change costs one map lookup plus one
// test per distinct prefix, whatever the number of clients. Everything here runs under the hub's
// lock.

// message is one change as the hub hands it to clients: its coordinates for filtering and its
// websocket frame, encoded once for every client (withFrame), and only for a change some client
// receives.
type message struct {
	id      int64
	channel string
	kind    string
	readers []string
	payload json.RawMessage
	created time.Time
	frame   []byte
}

func newMessage(c db.SiloChange) *message {
	return &message{id: c.ID, channel: c.Channel, kind: c.Kind, readers: c.Readers, payload: c.Payload, created: c.Created}
}

// withFrame encodes m's frame unless it is already; call it before m reaches any client's queue
// (the client's writer reads the frame without a lock).
func (m *message) withFrame() *message {
	if m.frame == nil {
		m.frame, _ = json.Marshal(wireChange{Type: "change", ID: m.id, Channel: m.channel, Kind: m.kind, Payload: m.payload, Created: m.created})
	}
	return m
}

// visible is the rule of api.changes_since (sql/change/) for live changes: an admin sees
// every change; anyone else sees a change whose readers overlap its own (_all, _auth, roles);
// a change without readers is for admins only.
func visible(changeReaders []string, readers map[string]struct{}, isAdmin bool) bool {
	if isAdmin {
		return true
	}
	for _, r := range changeReaders {
		if _, ok := readers[r]; ok {
			return true
		}
	}
	return false
}

// matches is the channel rule of api.changes_since: a pattern equal to the channel, or a pattern
// ending in * whose part before the * starts the channel.
func matches(pattern, channel string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(channel, p)
	}
	return pattern == channel
}

// fanout hands each change, in id order, to the clients it concerns. It holds the hub's lock, so a
// client that subscribes sees either all of a change's fan-out or none of it (then it reads the
// change from the log when it catches up).
func (h *Hub) fanout(rows []db.SiloChange) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range rows {
		if r.ID <= h.lastID {
			continue
		}
		m := newMessage(r)
		for c := range h.exact[m.channel] {
			h.push(c, m)
		}
		for p, set := range h.prefix {
			if strings.HasPrefix(m.channel, p) {
				for c := range set {
					h.push(c, m)
				}
			}
		}
		h.lastID = m.id
	}
	h.mFannedOut.Add(float64(len(rows)))
	h.mLastID.Set(float64(h.lastID))
}

// push queues m for c unless c may not see it or already has it (a change matching two of its
// patterns); a full queue disconnects c. Called with h.mu held.
func (h *Hub) push(c *client, m *message) {
	if m.id <= c.lastPushed || !visible(m.readers, c.readers, c.isAdmin) {
		return
	}
	c.lastPushed = m.id
	if !c.queue.push(m.withFrame()) {
		h.mSlow.Inc()
		h.removeLocked(c)
		c.kick(closeSlow, "too slow")
	}
}

// subscribe adds patterns to c's subscriptions in the hub's index and returns the last id fanned
// out: every later change on these patterns reaches c's queue. It fails when the hub is stopping.
func (h *Hub) subscribe(c *client, patterns []string) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, errors.New("the server is shutting down")
	}
	if c.gone {
		return 0, errors.New("the connection is closing")
	}
	for _, p := range patterns {
		idx, key := h.exact, p
		if k, ok := strings.CutSuffix(p, "*"); ok {
			idx, key = h.prefix, k
		}
		set := idx[key]
		if set == nil {
			set = map[*client]struct{}{}
			idx[key] = set
		}
		set[c] = struct{}{}
		c.hubPatterns[p] = struct{}{}
	}
	if c.lastPushed < h.lastID {
		c.lastPushed = h.lastID
	}
	return h.lastID, nil
}

// unsubscribe removes patterns from c's subscriptions in the hub's index.
func (h *Hub) unsubscribe(c *client, patterns []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range patterns {
		h.unindexLocked(c, p)
		delete(c.hubPatterns, p)
	}
}

func (h *Hub) unindexLocked(c *client, p string) {
	idx, key := h.exact, p
	if k, ok := strings.CutSuffix(p, "*"); ok {
		idx, key = h.prefix, k
	}
	if set := idx[key]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(idx, key)
		}
	}
}

// register adds a connected client; it fails when the hub is stopping.
func (h *Hub) register(c *client) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || !h.ready {
		return 0, errors.New("the change hub is not running")
	}
	h.clients[c] = struct{}{}
	h.conns.Add(1)
	h.mClients.Inc()
	c.lastPushed = h.lastID
	return h.lastID, nil
}

// remove takes c out of the hub (idempotent).
func (h *Hub) remove(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(c)
}

func (h *Hub) removeLocked(c *client) {
	if c.gone {
		return
	}
	c.gone = true
	for p := range c.hubPatterns {
		h.unindexLocked(c, p)
	}
	delete(h.clients, c)
	h.mClients.Dec()
}
