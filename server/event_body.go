package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"strconv"
	"unicode/utf8"
)

// The body of POST /events: one event object, a JSON array of them, or NDJSON (one event per line).
// The events go to SQL as they came: a JSON document is passed through unchanged, NDJSON as text
// apart from the JSON of the request (writeRequest.text), its lines as sent, so the body is
// parsed once, by PostgreSQL, line by line in one set-based pass (lines cost PostgreSQL half of
// what one JSON document of the same events does). Go only checks what PostgreSQL would refuse for the whole call (a line that is no JSON,
// invalid UTF-8, the escape \u0000 that jsonb cannot store): such a line becomes a null
// placeholder and is refused alone, with its reason, through the request's "invalid" member
// (api.event_ingest_requests). Whether an NDJSON line is JSON at all is left to PostgreSQL at
// first (checking each line here costs Go more than the rest of the request): a line it cannot
// read fails the call, and the handler sends the body again with every line checked.

// errEventBody is a body that is neither a JSON object or array nor NDJSON.
var errEventBody = errors.New("the body must be one event (a JSON object), a JSON array of events, or NDJSON (one event per line, Content-Type application/x-ndjson)")

// isNDJSON tells whether Content-Type ct names NDJSON (application/x-ndjson, application/ndjson,
// application/jsonl, application/x-jsonlines).
func isNDJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	switch mt {
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines", "application/jsonlines":
		return true
	}
	return false
}

// eventBody reads a POST /events body. It returns the events for SQL: the body itself when it is
// a JSON document (events), else the NDJSON lines, one per line (text); the unreadable NDJSON
// lines as a JSON object {"<position from 1>": "<reason>"} (nil when none), and how many events
// there are (-1 for a JSON document: SQL counts). A JSON document is taken when Content-Type does
// not name NDJSON and the body is one valid JSON object or array; a body of several lines that is
// not one JSON document is NDJSON whatever its Content-Type. Blank lines of NDJSON are skipped:
// positions count the other lines. The text is the same whether or not the lines are checked
// (check): the same body has the same text, and so the same idempotency key's hash; a line that
// is no UTF-8 is null in it, and only the lines named in invalid are not read as JSON.
func eventBody(contentType string, body []byte, check bool) (events, text, invalid []byte, n int, err error) {
	trimmed := bytes.TrimSpace(body)
	if !isNDJSON(contentType) && len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') && json.Valid(trimmed) {
		if !utf8.Valid(trimmed) {
			return nil, nil, nil, 0, errors.New("the body must be UTF-8")
		}
		if hasNULEscape(trimmed) {
			return nil, nil, nil, 0, errors.New(`JSON strings may not contain \u0000`)
		}
		return trimmed, nil, nil, -1, nil
	}
	if !isNDJSON(contentType) && (len(trimmed) == 0 || trimmed[0] != '{' || !bytes.ContainsRune(trimmed, '\n')) {
		return nil, nil, nil, 0, errEventBody
	}
	text = make([]byte, 0, len(body))
	var bad []byte
	line := 0
	for rest := body; len(rest) > 0; {
		var l []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			l, rest = rest[:i], rest[i+1:]
		} else {
			l, rest = rest, nil
		}
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		line++
		if line > 1 {
			text = append(text, '\n')
		}
		reason, asText := lineProblem(l, check)
		if asText {
			text = append(text, l...)
		} else {
			text = append(text, "null"...)
		}
		if reason != "" {
			if bad == nil {
				bad = append(bad, '{')
			} else {
				bad = append(bad, ',')
			}
			bad = append(bad, '"')
			bad = strconv.AppendInt(bad, int64(line), 10)
			bad = append(bad, `":`...)
			r, _ := json.Marshal("line " + strconv.Itoa(line) + " " + reason) // a string always marshals
			bad = append(bad, r...)
		}
	}
	if bad != nil {
		bad = append(bad, '}')
	}
	return nil, text, bad, line, nil
}

// lineProblem is why one NDJSON line cannot go to PostgreSQL as JSON, "" when it can (whether it
// is JSON at all is checked only when check is set), and whether it can go as text (UTF-8 without
// a NUL byte, which PostgreSQL's text cannot hold).
func lineProblem(l []byte, check bool) (reason string, asText bool) {
	if !utf8.Valid(l) {
		return "is not UTF-8", false
	}
	if bytes.IndexByte(l, 0) >= 0 {
		return "is not valid JSON: it holds a NUL byte", false
	}
	if check && !json.Valid(l) {
		var v any
		err := json.Unmarshal(l, &v)
		if err == nil {
			return "is not valid JSON", true
		}
		return "is not valid JSON: " + err.Error(), true
	}
	if hasNULEscape(l) {
		return `holds \u0000, which JSON strings may not contain here`, true
	}
	return "", true
}
