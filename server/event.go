package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/db"
)

// The event store's routes (sql/event/): POST /events ingests, the reads are Granary's Event Store
// API. Who may: ingest needs a token that may write (admins may); reads need a token, any token:
// events are not filtered by readers, so they are never read anonymously, whatever
// auth.anonymous_reads says.
//
// The paths /events/{correlationId}[/{eventId}] would conflict with the per-user routes
// /{username}/events in one mux (both match /events/events, neither more specific): the router
// (router.go) keeps Silo's own routes and the per-user ones in two, and the username "events" is
// reserved.

// eventResult is one element of POST /events' answer.
type eventResult struct {
	EventID     *string      `json:"eventId"`
	Status      string       `json:"status"`
	FirstStored *string      `json:"firstStored,omitempty"`
	Error       *errorObject `json:"error,omitempty"`
}

// millis formats t as Granary does: ISO 8601, UTC, milliseconds.
func millis(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// POST /events: one event, a JSON array of events, or NDJSON. The answer is a JSON array with one
// result per event, in order: stored, duplicate (with firstStored) or refused (with the error).
// When no event is refused, PostgreSQL gives the answer's text (event_private.answer_text), which
// goes out as it came; otherwise a row per event, encoded here.
// Status: 200 when no event was refused, 207 when some were and others stored or duplicate, 422
// when every event was refused; a request refused whole (an invalid or reused Idempotency-Key) is
// an error as elsewhere.
func (s *server) eventIngest(w http.ResponseWriter, r *http.Request, join *joiner[struct{}, db.EventIngestRequestsRow]) {
	id, ok := s.writer(w, r)
	if !ok {
		return
	}
	body, err := readLimited(w, r, s.maxBody)
	if err != nil {
		s.bodyReadError(w, err)
		return
	}
	ingest := func(check bool) ([]db.EventIngestRequestsRow, error) {
		events, text, invalid, _, err := eventBody(r.Header.Get("Content-Type"), body, check)
		if err != nil {
			return nil, errBadEventBody{err}
		}
		if invalid != nil {
			// The request object's "invalid" member rides after the events (writeRequest writes
			// the body as the value of its field, or "text": true for NDJSON): {"events":
			// [...],"invalid": {...}, ...}.
			events = append(append(events, `,"invalid":`...), invalid...)
		}
		req := writeRequest{body: events, text: text, field: "events", tokenID: id.TokenID, key: idempotencyKey(r.Header)}
		rows, err := join.do(r.Context(), struct{}{}, "", req)
		if err == nil && len(rows) == 1 && rows[0].Status == "refused" && rows[0].Ord == nil {
			err = refusal(rows[0].SQLState, rows[0].Reason)
		}
		if err != nil && text != nil && !check && jsonUnreadable(err) {
			return nil, errUncheckedLines
		}
		return rows, err
	}
	rows, err := ingest(false)
	if errors.Is(err, errUncheckedLines) {
		// A line PostgreSQL could not read failed the call (nothing was stored): again, with every
		// line checked, so that such lines are refused alone.
		rows, err = ingest(true)
	}
	var bad errBadEventBody
	if errors.As(err, &bad) {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", bad.err.Error(), nil)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(rows) == 1 && rows[0].Answer != nil {
		// No event refused: PostgreSQL wrote the whole answer.
		if rows[0].Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, *rows[0].Answer)
		_, _ = io.WriteString(w, "\n")
		return
	}
	out := make([]eventResult, len(rows))
	refused := 0
	for i, row := range rows {
		out[i] = eventResult{EventID: row.EventID, Status: row.Status}
		if row.FirstStored != nil {
			t := millis(*row.FirstStored)
			out[i].FirstStored = &t
		}
		if row.Status == "refused" {
			refused++
			out[i].Error = itemRefusal("invalid-event", row.SQLState, row.Reason)
		}
		if row.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	}
	writeEventJSON(w, perItemStatus(refused, len(rows)), out)
}

// errBadEventBody is a POST /events body that is neither JSON nor NDJSON.
type errBadEventBody struct{ err error }

func (e errBadEventBody) Error() string { return e.err.Error() }

// errUncheckedLines: PostgreSQL could not read an NDJSON line sent unchecked.
var errUncheckedLines = errors.New("an NDJSON line is no JSON")

// jsonUnreadable tells whether err is PostgreSQL refusing input as JSON: invalid syntax (22P02),
// or an escape jsonb cannot hold (22P05).
func jsonUnreadable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "22P02" || pgErr.Code == "22P05")
}

// eventDoc is one event in the answers of the reads (Granary's shape, plus correlationId,
// eventType and received).
type eventDoc struct {
	EventID       string         `json:"eventId"`
	CorrelationID string         `json:"correlationId"`
	EventType     string         `json:"eventType"`
	Created       string         `json:"created"`
	Received      string         `json:"received"`
	Message       *eventMessage  `json:"message"`
	Links         map[string]any `json:"_links"`
}

// eventMessage is an event as it was sent.
type eventMessage struct {
	Headers json.RawMessage `json:"event_headers"`
	Payload json.RawMessage `json:"event_payload"`
}

// writeEventJSON is writeJSON without HTML escaping: the links' & stay & (Granary's answers).
func writeEventJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func href(u string) map[string]string { return map[string]string{"href": u} }

func eventPath(cid, eid string) string {
	return "/events/" + url.PathEscape(cid) + "/" + url.PathEscape(eid)
}

// timeParam reads an optional time query parameter: ISO 8601 (RFC 3339, or a date) or epoch
// milliseconds.
func timeParam(q url.Values, name string) (*time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return nil, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 && ms <= 253402300799999 {
		t := time.UnixMilli(ms).UTC()
		return &t, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return &t, nil
		}
	}
	return nil, fmt.Errorf("query parameter %s must be an ISO 8601 time (2018-11-01T11:47:38.000Z) or epoch milliseconds, not %q", name, v)
}

// GET /events/{correlationId} and GET /events?eventType=: a page of events, ascending by time.
func (s *server) eventList(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.require(w, r, func(db.TokenAuthenticateRow) bool { return true }, ""); !ok {
		return
	}
	q := r.URL.Query()
	p := db.EventListParams{}
	if cid := r.PathValue("correlationId"); cid != "" {
		p.CorrelationID = &cid
	} else if t := q.Get("eventType"); t != "" {
		p.EventType = &t
	} else {
		badParam(w, errors.New("query parameter eventType is required (or read /events/{correlationId})"))
		return
	}
	if p.CorrelationID != nil && q.Get("eventType") != "" {
		t := q.Get("eventType")
		p.EventType = &t
	}
	from, err1 := timeParam(q, "from")
	to, err2 := timeParam(q, "to")
	offset, err3 := intParam(q, "offset", 0, 0, 1<<30)
	size, err4 := intParam(q, "pagesize", 20, 1, 1000)
	var message, total bool
	var err5 error
	for _, e := range strings.Split(q.Get("expand"), ",") {
		switch strings.TrimSpace(e) {
		case "":
		case "message":
			message = true
		case "totalCount":
			total = true
		default:
			err5 = fmt.Errorf("query parameter expand takes message and totalCount, comma-separated, not %q", e)
		}
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		badParam(w, err)
		return
	}
	p.FromTime, p.ToTime, p.PageOffset, p.PageSize, p.Total = from, to, int32(offset), int32(size), total
	rows, err := s.q.EventList(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(rows) == 0 {
		writeError(w, http.StatusNotFound, "unknown-resource", "no events found", nil)
		return
	}
	out := struct {
		TotalCount *int64         `json:"totalCount"`
		Events     []eventDoc     `json:"events"`
		Links      map[string]any `json:"_links"`
	}{Events: make([]eventDoc, len(rows))}
	for i, row := range rows {
		out.TotalCount = row.TotalCount
		out.Events[i] = newEventDoc(row.EventID, row.CorrelationID, row.EventType, row.At, row.Received, row.Headers, row.Payload, message)
	}
	page := func(off int) map[string]string {
		u := *r.URL
		v := u.Query()
		v.Set("offset", strconv.Itoa(off))
		v.Set("pagesize", strconv.Itoa(size))
		u.RawQuery = v.Encode()
		return href(u.RequestURI())
	}
	out.Links = map[string]any{"self": page(offset)}
	if len(rows) == size && (out.TotalCount == nil || int64(offset+size) < *out.TotalCount) {
		out.Links["next"] = page(offset + size)
	}
	writeEventJSON(w, http.StatusOK, out)
}

func newEventDoc(eid, cid, typ string, at, received time.Time, headers, payload json.RawMessage, message bool) eventDoc {
	d := eventDoc{EventID: eid, CorrelationID: cid, EventType: typ, Created: millis(at), Received: millis(received),
		Links: map[string]any{"self": href(eventPath(cid, eid))}}
	if message {
		d.Message = &eventMessage{Headers: headers, Payload: payload}
	}
	return d
}

// GET /events/{correlationId}/{eventId}: one event with its message.
func (s *server) eventGet(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.require(w, r, func(db.TokenAuthenticateRow) bool { return true }, ""); !ok {
		return
	}
	row, err := s.q.EventGet(r.Context(), db.EventGetParams{CorrelationID: r.PathValue("correlationId"), EventID: r.PathValue("eventId")})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeEventJSON(w, http.StatusOK, newEventDoc(row.EventID, row.CorrelationID, row.EventType, row.At, row.Received, row.Headers, row.Payload, true))
}

// eventRoutes registers the event store's routes with route (the route table's). Silo's own
// routes and the per-user routes of accounts (/{username}/events) are in two muxes (router.go), so
// /events/{correlationId} never meets /{username}/events; the username events is reserved.
func (s *server) eventRoutes(route func(pattern string, h http.HandlerFunc)) {
	join := s.newIngestJoin()
	route("POST /events", func(w http.ResponseWriter, r *http.Request) { s.eventIngest(w, r, join) })
	route("GET /events", s.eventList)
	route("GET /events/{correlationId}", s.eventList)
	route("GET /events/{correlationId}/{eventId}", s.eventGet)
}

// newIngestJoin is POST /events' joiner: concurrent small requests in one call (group commit).
func (s *server) newIngestJoin() *joiner[struct{}, db.EventIngestRequestsRow] {
	return newTextJoiner(func(ctx context.Context, _ struct{}, requests []byte, texts []string) ([]db.EventIngestRequestsRow, error) {
		return s.q.EventIngestRequests(ctx, db.EventIngestRequestsParams{Requests: requests, Texts: texts, Answers: true})
	}, func(r db.EventIngestRequestsRow) int32 { return r.Request })
}
