package change

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/silo-db/silo/db"
)

// Which subscription patterns a client may have is the SQL's rule (sql/change/01_publish.sql,
// "Channel names"): api.change_channels_check refuses a pattern that is no channel pattern (SLINV)
// and a channel for admins only to anyone else (SLFRB). The hub asks it before it subscribes
// anyone, so a client hears at once what it will never receive. Only what PostgreSQL cannot hold
// at all (a NUL, bytes that are not UTF-8) is refused here, before the question.

// Error ids of refused patterns, as in the HTTP API's errors.
const (
	// ErrIDInvalidChannel: the pattern is no channel pattern (bogus, empty, a * before its end).
	ErrIDInvalidChannel = "invalid-parameters-format"
	// ErrIDForbiddenChannel: a channel for admins only, asked for by someone else (dead-letters).
	ErrIDForbiddenChannel = "forbidden"
)

// Refusal is a subscription pattern a client may not have, and why.
type Refusal struct {
	Channel string
	ID      string // ErrIDInvalidChannel or ErrIDForbiddenChannel
	Message string
	Hint    string // the rule of channel names, for an invalid pattern
}

// CheckChannels returns the patterns of channels that a client (an admin or not) may not subscribe
// to, in the order given, each once; none when all are fine. Its error is the database's.
func (h *Hub) CheckChannels(ctx context.Context, channels []string, admin bool) ([]Refusal, error) {
	var out []Refusal
	var ask []string
	seen := map[string]bool{}
	for _, c := range channels {
		if seen[c] {
			continue
		}
		seen[c] = true
		if why := unstorable(c); why != "" {
			out = append(out, Refusal{Channel: c, ID: ErrIDInvalidChannel, Message: "invalid channel: " + why})
			continue
		}
		ask = append(ask, c)
	}
	if len(ask) == 0 {
		return out, nil
	}
	rows, err := h.q.ChangeChannelsCheck(ctx, db.ChangeChannelsCheckParams{Channels: ask, IsAdmin: admin})
	if err != nil {
		return nil, fmt.Errorf("error checking channels: %w", err)
	}
	refused := make([]Refusal, 0, len(rows))
	for _, r := range rows {
		f := Refusal{Channel: r.Channel, ID: ErrIDInvalidChannel, Message: r.Message, Hint: r.Hint}
		if r.SQLState == "SLFRB" {
			f.ID = ErrIDForbiddenChannel
		}
		refused = append(refused, f)
	}
	// In the order given: the refusals found here and those of the SQL interleaved.
	byName := make(map[string]Refusal, len(out)+len(refused))
	for _, f := range append(out, refused...) {
		byName[f.Channel] = f
	}
	out = out[:0]
	for _, c := range channels {
		if f, ok := byName[c]; ok {
			out = append(out, f)
			delete(byName, c)
		}
	}
	return out, nil
}

// unstorable says why PostgreSQL could not even receive s as text ("" when it can): PostgreSQL
// refuses a NUL and bytes that are not UTF-8 (SQLSTATE 22021) before any rule of Silo's is asked.
func unstorable(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return `a channel cannot contain \u0000`
	case !utf8.ValidString(s):
		return "a channel must be UTF-8"
	}
	return ""
}
