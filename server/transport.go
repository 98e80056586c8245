package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"unicode/utf8"
)

// Series appends that come by another transport than HTTP (MQTT, a websocket message). Each is
// checked by the HTTP route's rules (a JSON object, UTF-8, no \u0000; CSV turned into flatJSON the
// same way) and written through the same joiner, so one call of api.series_append_requests
// validates, stores and notifies it whatever brought it, joined with the HTTP requests of the
// moment. The caller maps the outcome to its protocol's answer.

// seriesSubmit writes one series append for access: to event (flatJSON), or a seriesBatch when
// event is "". It returns the SQL's answer, whether it was a replay of key, or an error: an
// *APIError for a request refused (bad input, permission), database trouble (DatabaseUnavailable)
// or something unexpected.
func (s *server) seriesSubmit(ctx context.Context, access, event string, body []byte, key *string) (json.RawMessage, bool, error) {
	if handled, err := s.seriesTryColumns(ctx, access, event, body, key); handled {
		if err != nil {
			if e, ok := ErrorFor(err); ok {
				return nil, false, e
			}
			return nil, false, err
		}
		return json.RawMessage(`{"status": "ok"}`), false, nil
	}
	if err := checkJSONObject(body); err != nil {
		return nil, false, err
	}
	member := "data"
	if event == "" {
		member = "batch"
	}
	row, err := s.seriesJoined(ctx, access, seriesRequest(access, event, member, body), key)
	if err != nil {
		if e, ok := ErrorFor(err); ok {
			return nil, false, e
		}
		return nil, false, err
	}
	return row.Answer, row.Replayed, nil
}

// checkJSONObject applies readBody's rules to a body that came by another transport, as the
// *APIError HTTP would answer.
func checkJSONObject(body []byte) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	switch {
	case !json.Valid(body) || len(trimmed) == 0 || trimmed[0] != '{':
		return &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure", Message: "the body must be a JSON object (flatJSON or seriesBatch)"}
	case !utf8.Valid(body):
		return &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure", Message: "the body must be UTF-8"}
	case hasNULEscape(body):
		return &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure", Message: `JSON strings may not contain \u0000`}
	}
	return nil
}

// badCSV is the refusal of a CSV body that seriesCSV could not read.
func badCSV(err error) error {
	return &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure", Message: err.Error()}
}

// transportError is an error of seriesSubmit as an error object of the HTTP API ({"id",
// "message", "data"}), with whether it is database trouble (the client should retry) and the
// reason to count it under. Unexpected errors are logged here and answered without internals.
func (s *server) transportError(err error, where string) (e *APIError, unavailable bool) {
	var api *APIError
	if errors.As(err, &api) {
		return api, false
	}
	if msg, down := DatabaseUnavailable(err); down {
		return &APIError{Status: http.StatusServiceUnavailable, ID: UnavailableID, Message: msg}, true
	}
	s.log.Error("series append failed", "transport", where, "err", err)
	return &APIError{Status: http.StatusInternalServerError, ID: "unexpected-error", Message: "unexpected error; the server log has the details"}, false
}

// countPoints counts the points of a flatJSON or seriesBatch body that was applied: the elements
// of every array that is the value of a "points" member. It reads the bytes once, without
// decoding them (metrics only; the SQL has read the body).
func countPoints(body []byte) int {
	n := 0
	// The stack of open containers: '{' or '[', and for an array whether it is a points array.
	type level struct {
		obj    bool
		points bool
	}
	var stack []level
	key, lastKey := false, ""
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch c {
		case '"':
			j := i + 1
			for j < len(body) && body[j] != '"' {
				if body[j] == '\\' {
					j++
				}
				j++
			}
			if len(stack) > 0 && stack[len(stack)-1].obj && !key {
				lastKey = string(body[i+1 : min(j, len(body))])
			}
			i = j
		case ':':
			key = true
		case ',':
			key = false
		case '{', '[':
			if len(stack) > 0 && !stack[len(stack)-1].obj && stack[len(stack)-1].points {
				n++
			}
			stack = append(stack, level{obj: c == '{', points: c == '[' && key && lastKey == "points"})
			key = false
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			key = len(stack) > 0 && stack[len(stack)-1].obj
		}
	}
	return n
}

// Series appends over a websocket: GET /{username}/ws takes, besides subscribe and unsubscribe,
//
//	{"type":"series.append","id":<any JSON>,"eventId":"<event>","body":{flatJSON}}
//	{"type":"series.append","id":...,"eventId":"<event>","csv":"deltaTime,value\n0,1.5\n"}
//	{"type":"series.batch","id":...,"body":{seriesBatch}}
//
// with an optional "idempotencyKey", under the connection's access and its permissions, and
// answers each with {"type":"ack","id":...,"result":{"status":"ok"}} (and "replayed":true for a
// repeated key) or {"type":"error","id":...,"error":{"id","message","data"}}, the HTTP route's
// error. GET /ws serves Silo tokens, which hold no account access: there a series message is
// answered with an error naming the route to use.

// wsSeriesMessage is a series append message.
type wsSeriesMessage struct {
	ID             json.RawMessage `json:"id"`
	EventID        *string         `json:"eventId"`
	Body           json.RawMessage `json:"body"`
	CSV            *string         `json:"csv"`
	IdempotencyKey *string         `json:"idempotencyKey"`
}

// wsAnswer is the answer to a request message.
type wsAnswer struct {
	Type     string          `json:"type"`
	ID       json.RawMessage `json:"id"`
	Result   json.RawMessage `json:"result,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	Error    *wsError        `json:"error,omitempty"`
}

type wsError struct {
	ID      string         `json:"id"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func wsAnswerError(id json.RawMessage, e *APIError) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(wsAnswer{Type: "error", ID: id, Error: &wsError{ID: e.ID, Message: e.Message, Data: e.Data}}) // always marshals
	return b
}

// wsSeriesRequests are the request handlers of an account websocket of access.
func (s *server) wsSeriesRequests(access string) map[string]func(context.Context, []byte) []byte {
	handle := func(batch bool) func(context.Context, []byte) []byte {
		return func(ctx context.Context, msg []byte) []byte {
			var m wsSeriesMessage
			if err := json.Unmarshal(msg, &m); err != nil {
				return wsAnswerError(m.ID, &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure", Message: "a series message must be a JSON object: " + err.Error()})
			}
			body, event, err := wsSeriesBody(m, batch)
			if err == nil {
				var answer json.RawMessage
				var replayed bool
				answer, replayed, err = s.seriesSubmit(ctx, access, event, body, m.IdempotencyKey)
				if err == nil {
					s.metrics.transport.add("websocket", countPoints(body))
					b, _ := json.Marshal(wsAnswer{Type: "ack", ID: cmpID(m.ID), Result: answer, Replayed: replayed}) // always marshals
					return b
				}
			}
			e, _ := s.transportError(err, "websocket")
			s.metrics.transport.reject("websocket", e.ID)
			return wsAnswerError(m.ID, e)
		}
	}
	return map[string]func(context.Context, []byte) []byte{"series.append": handle(false), "series.batch": handle(true)}
}

// cmpID is the client's id, null when it gave none.
func cmpID(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

// wsSeriesBody checks a series message and returns its body (flatJSON or seriesBatch) and event.
func wsSeriesBody(m wsSeriesMessage, batch bool) ([]byte, string, error) {
	bad := func(msg string) error {
		return &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure", Message: msg}
	}
	if len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, "", bad(`a series message needs an "id" of the client's choice, which its answer carries`)
	}
	if batch {
		if m.EventID != nil || m.CSV != nil {
			return nil, "", bad(`series.batch takes "body" (seriesBatch) and no "eventId" or "csv"`)
		}
		if len(m.Body) == 0 {
			return nil, "", bad(`series.batch needs "body": {"format":"seriesBatch","data":[...]}`)
		}
		return m.Body, "", nil
	}
	if m.EventID == nil || *m.EventID == "" {
		return nil, "", bad(`series.append needs "eventId": the series event to append to`)
	}
	switch {
	case len(m.Body) > 0 && m.CSV != nil:
		return nil, "", bad(`series.append takes "body" (flatJSON) or "csv", not both`)
	case m.CSV != nil:
		flat, err := seriesCSV([]byte(*m.CSV))
		if err != nil {
			return nil, "", badCSV(err)
		}
		return flat, *m.EventID, nil
	case len(m.Body) == 0:
		return nil, "", bad(`series.append needs "body": {"format":"flatJSON","fields":[...],"points":[...]} (or "csv")`)
	}
	return m.Body, *m.EventID, nil
}

// wsSeriesElsewhere answers series messages on GET /ws, whose Silo tokens hold no account access.
func wsSeriesElsewhere() map[string]func(context.Context, []byte) []byte {
	h := func(_ context.Context, msg []byte) []byte {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(msg, &m) // the reader has checked it is a JSON object
		return wsAnswerError(m.ID, &APIError{Status: http.StatusBadRequest, ID: "invalid-operation",
			Message: "series appends go over GET /{username}/ws, with an access token of that user"})
	}
	return map[string]func(context.Context, []byte) []byte{"series.append": h, "series.batch": h}
}
