package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What every handler uses to read a request and answer it: JSON bodies in and out, errors in
// Pryv's shape, query parameters.

// errorBody is Pryv's error shape.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	ID      string         `json:"id"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, id, message string, data map[string]any) {
	writeJSON(w, status, errorBody{Error: errorObject{ID: id, Message: message, Data: data}})
}

// fail answers an error from a query: nothing when the client went away, database trouble
// (DatabaseUnavailable) with a logged 503 and Retry-After, a registered SQLSTATE with its status
// and id, anything else with a logged 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away
	}
	if msg, ok := DatabaseUnavailable(err); ok {
		s.log.Warn("database unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(UnavailableRetryAfter))
		writeError(w, http.StatusServiceUnavailable, UnavailableID, msg, nil)
		return
	}
	if apiErr, ok := ErrorFor(err); ok {
		if apiErr.Status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", strconv.Itoa(UnavailableRetryAfter))
		}
		writeError(w, apiErr.Status, apiErr.ID, apiErr.Message, apiErr.Data)
		return
	}
	s.log.Error("unexpected error", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, "unexpected-error", "unexpected error", nil)
}

// readLimited reads a request body of at most max bytes.
func readLimited(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, max)
	if n := r.ContentLength; n > 0 && n <= max {
		// Read into one buffer of the announced size (io.ReadAll would grow and copy it a dozen
		// times for a large body); a body longer than announced still grows it.
		buf := bytes.NewBuffer(make([]byte, 0, n+bytes.MinRead))
		_, err := buf.ReadFrom(body)
		return buf.Bytes(), err
	}
	return io.ReadAll(body)
}

// readBody reads a JSON body that must be an object or an array.
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := readLimited(w, r, s.maxBody)
	if err != nil {
		s.bodyReadError(w, err)
		return nil, false
	}
	return body, s.checkJSONBody(w, body)
}

// bodyReadError answers a body that could not be read: too large (413) or cut off (400).
func (s *server) bodyReadError(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("request body larger than %d bytes", s.maxBody), nil)
	} else {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", "error reading the request body", nil)
	}
}

// checkJSONBody tells whether body is a JSON object or array PostgreSQL can take, and answers 400
// when it is not.
func (s *server) checkJSONBody(w http.ResponseWriter, body []byte) bool {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if !json.Valid(body) || len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", "the body must be a JSON object or a JSON array of objects", nil)
		return false
	}
	// PostgreSQL takes UTF-8 only (Go's JSON check lets other bytes through in strings), and its
	// jsonb refuses \u0000 in strings: that is bad input, not a server error. A raw NUL byte never
	// gets this far: JSON allows no control character unescaped.
	if !utf8.Valid(body) {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", "the body must be UTF-8", nil)
		return false
	}
	if hasNULEscape(body) {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", `JSON strings may not contain \u0000`, nil)
		return false
	}
	return true
}

// hasNULEscape tells whether a valid JSON text holds the escape \u0000 (U+0000), which jsonb cannot
// store. The same six bytes after an escaped backslash are text ("C:\\u0000dir" is a backslash,
// then u0000): the escape is real only when the run of backslashes ending at its u is odd.
func hasNULEscape(body []byte) bool {
	const esc = `\u0000`
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(esc))
		if j < 0 {
			return false
		}
		at := i + j // the backslash of the match
		run := 1
		for k := at - 1; k >= 0 && body[k] == '\\'; k-- {
			run++
		}
		if run%2 == 1 {
			return true
		}
		i = at + len(esc)
	}
}

// boolParam reads an optional boolean query parameter.
func boolParam(q url.Values, name string, def bool) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	if err != nil {
		return false, fmt.Errorf("query parameter %s must be true or false, not %q", name, v)
	}
	return b, nil
}

func intParam(q url.Values, name string, def, min, max int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("query parameter %s must be an integer from %d to %d, not %q", name, min, max, v)
	}
	return n, nil
}

func badParam(w http.ResponseWriter, err error) {
	writeError(w, http.StatusBadRequest, "invalid-parameters-format", err.Error(), nil)
}

// itemRefusal is the error of one refused item of a write answered per item (events, ODS items,
// job events): the registered error id of its SQLSTATE when there is one, else fallbackID, its
// reason as the message and the SQLSTATE in data.
func itemRefusal(fallbackID string, sqlstate, reason *string) *errorObject {
	e := &errorObject{ID: fallbackID, Data: map[string]any{}}
	if sqlstate != nil {
		e.Data["sqlstate"] = *sqlstate
		if def, ok := lookupError(*sqlstate); ok {
			e.ID = def.ID
		}
	}
	if reason != nil {
		e.Message = *reason
	}
	return e
}

// perItemStatus is the status of a write answered per item: 200 when none of total was refused,
// 207 when some were, 422 when all were.
func perItemStatus(refused, total int) int {
	switch {
	case refused > 0 && refused == total:
		return http.StatusUnprocessableEntity
	case refused > 0:
		return http.StatusMultiStatus
	}
	return http.StatusOK
}
