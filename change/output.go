package change

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// A session's output: the changes taken for the client, in id order, with their debounce. Only
// the session's writer goroutine touches it.

// outItem is a change (or a reply that must not overtake the changes before it) waiting to be
// written; a debounced change gathers the later changes of its channel and kind until its deadline.
type outItem struct {
	m        *message // nil: a reply, reply holds its frame
	reply    []byte
	deadline time.Time // zero: ready
	payload  json.RawMessage
	count    int
	lastID   int64
}

// emit takes a change into the output: once (by id), only while the connection still subscribes
// to its channel, coalesced into a waiting change of the same channel and kind when the
// subscription has a debounce.
func (s *session) emit(m *message) {
	if m.id <= s.seen {
		return
	}
	s.seen = m.id
	debounce, ok := s.debounceFor(m.channel)
	if !ok {
		return
	}
	s.emitted = true
	if debounce > 0 && s.h.coalesce[m.kind] {
		for _, it := range s.out {
			if !it.deadline.IsZero() && it.m != nil && it.m.channel == m.channel && it.m.kind == m.kind {
				it.payload = mergePayload(it.payload, m.payload)
				it.count++
				it.lastID = m.id
				return
			}
		}
		s.out = append(s.out, &outItem{m: m, deadline: time.Now().Add(debounce), payload: m.payload, count: 1, lastID: m.id})
		return
	}
	s.out = append(s.out, &outItem{m: m})
}

// debounceFor: whether the connection subscribes to channel, and the longest debounce of the
// patterns that match it.
func (s *session) debounceFor(channel string) (time.Duration, bool) {
	var d time.Duration
	found := false
	if v, ok := s.subs[channel]; ok {
		d, found = v, true
	}
	for p, v := range s.subs {
		if strings.HasSuffix(p, "*") && matches(p, channel) {
			d, found = max(d, v), true
		}
	}
	return d, found
}

// flushOK writes the waiting changes from the head while they are due; a debounced change not yet
// due holds back the ones behind it (ids stay in order). False when a write failed or too many
// changes wait.
func (s *session) flushOK() bool {
	now := time.Now()
	for len(s.out) > 0 {
		it := s.out[0]
		if !it.deadline.IsZero() && now.Before(it.deadline) {
			if !s.timerOn {
				s.timer.Reset(it.deadline.Sub(now))
				s.timerOn = true
			}
			return len(s.out) <= s.h.cfg.ClientBuffer
		}
		if it.m == nil {
			if err := s.write(it.reply); err != nil {
				return false
			}
			s.out[0] = nil
			s.out = s.out[1:]
			continue
		}
		frame := it.m.frame
		if it.count > 1 {
			frame, _ = json.Marshal(wireChange{Type: "change", ID: it.m.id, Channel: it.m.channel, Kind: it.m.kind,
				Payload: it.payload, Created: it.m.created, Coalesced: it.count, LastID: it.lastID})
		}
		if err := s.write(frame); err != nil {
			return false
		}
		s.h.mMessages.Inc()
		s.written = it.m.id
		s.out[0] = nil
		s.out = s.out[1:]
	}
	s.out = nil
	return true
}

// mergePayload coalesces two payloads of one channel and kind: the later one, with the union of
// both "paths" arrays when both have one.
func mergePayload(a, b json.RawMessage) json.RawMessage {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return b
	}
	var pa, pb []string
	if json.Unmarshal(ma["paths"], &pa) != nil || json.Unmarshal(mb["paths"], &pb) != nil {
		return b
	}
	for _, p := range pa {
		if !slices.Contains(pb, p) {
			pb = append(pb, p)
		}
	}
	slices.Sort(pb)
	mb["paths"], _ = json.Marshal(pb)
	out, err := json.Marshal(mb)
	if err != nil {
		return b
	}
	return out
}
