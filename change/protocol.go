package change

import (
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The session protocol (README, "Change notifications"). A session is opened by a transport that
// has authenticated the client (GET /ws in package server), with optional parameters that
// ParseQuery reads:
//
//	[after=<id>][&channel=<pattern>...|&channels=<p1>,<p2>][&debounce_ms=<ms>]
//
// Server → client, one JSON object per text message:
//
//	{"type":"ready","position":N}                         first; N is where the connection starts
//	{"type":"change","id":N,"channel":...,"kind":...,"payload":{...},"created":...}
//	{"type":"subscribed","channels":[...],"position":N}   after a subscribe has caught up: every channel now subscribed
//	{"type":"unsubscribed","channels":[...]}              the channels the unsubscribe removed
//	{"type":"expired","after":A,"resume_after":R,"cause":"expired"|"ahead","message":...}
//	{"type":"error","error":{"id":...,"message":...,"data":{...}}}
//
// A subscribe (or the channels of the opening parameters) is checked channel by channel
// (Hub.CheckChannels, the SQL's rule): each pattern refused gets an error of its own,
//
//	{"type":"error","error":{"id":"invalid-parameters-format","message":...,"data":{"channel":"bogus","hint":...}}}
//	{"type":"error","error":{"id":"forbidden","message":...,"data":{"channel":"dead-letters"}}}
//
// and is left out; the others are subscribed (subscribed follows unless none is left). The
// transport refuses the opening parameters with 400 before the upgrade when a pattern is invalid;
// a forbidden one is answered on the connection like a subscribe.
//
// Client → server:
//
//	{"type":"subscribe","channels":["profile:customer:42","profile:contract:*"],"after":N,"debounce_ms":200}
//	{"type":"unsubscribe","channels":[...]}
//
// and the requests the transport serves on the connection (Identity.Requests: GET /{username}/ws
// takes series appends), each answered by the transport's handler with a message of its own
// (an acknowledgement or an error carrying the client's id), written behind the changes already
// taken into the output.
//
// Each connection has a position: the id of the last change written to it, or, before the first,
// the after it was opened with (or the end of the change log when it was opened without one).
// Whenever channels are added, the connection catches up from the change log (api.changes_since)
// with every change after its position on any of its channels, then goes on with live changes:
// ids only grow, nothing is skipped and nothing comes twice. A client that reconnects with
// after=<last id it saw> therefore misses nothing (within the retention).

// Close codes and reasons.
const (
	closeSlow   = 4000 // the client's queue overflowed: "too slow: resume with after=N"
	closeAuth   = 4001 // the token was revoked: "access token no longer valid"
	closeBehind = 4002 // the process fell behind the change log's retention: "server behind: resume with after=N"
)

// SessionOptions are what a session starts with: the position to resume from and the first
// subscription.
type SessionOptions struct {
	// After: resume after this change id (nil: from the end of the change log).
	After *int64
	// Channels: patterns subscribed to at once (none: the client subscribes with messages).
	Channels []string
	// Debounce of the first subscription (0: none).
	Debounce time.Duration
}

// ParseQuery reads the session's opening parameters (after, channel, channels, debounce_ms) from a
// query string. Its error's text is meant for the client.
func ParseQuery(q url.Values) (SessionOptions, error) {
	var o SessionOptions
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return o, errors.New("after must be a change id (a whole number, 0 or more)")
		}
		o.After = &n
	}
	o.Channels = append(o.Channels, q["channel"]...)
	for _, v := range q["channels"] {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				o.Channels = append(o.Channels, c)
			}
		}
	}
	if v := q.Get("debounce_ms"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > 60000 {
			return o, errors.New("debounce_ms must be a whole number of milliseconds between 0 and 60000")
		}
		o.Debounce = time.Duration(n) * time.Millisecond
	}
	return o, nil
}

// clientMessage is a message from the client.
type clientMessage struct {
	Type       string   `json:"type"`
	Channels   []string `json:"channels"`
	After      *int64   `json:"after"`
	DebounceMS *int64   `json:"debounce_ms"`
	bad        string   // why the message could not be read
}

// wireChange is the JSON of a change message (type "change").
type wireChange struct {
	Type    string          `json:"type"`
	ID      int64           `json:"id"`
	Channel string          `json:"channel"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
	Created time.Time       `json:"created"`
	// Coalesced: how many changes a debounced message stands for (absent: one); LastID the
	// highest id among them.
	Coalesced int   `json:"coalesced,omitempty"`
	LastID    int64 `json:"last_id,omitempty"`
}

// wireError is the "error" object of an error message: the shape of the HTTP API's errors.
type wireError struct {
	ID      string         `json:"id"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}
