package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silo-db/silo/db"
)

// High-frequency series (Pryv's HF routes) under /{username}/: appends of flatJSON (or CSV) to one
// series, seriesBatch appends to many, range reads streamed page by page, range deletes. The rules
// are in sql/series/; a handler authenticates (the access id), decodes, makes one generated call
// per request (per page for a read) and encodes. The write routes share one joiner (group commit),
// each request keeping its access and Idempotency-Key.

// seriesPage is how many points a read fetches per call: a large range is sent as it is read,
// never held whole.
const seriesPage = 50000

// seriesJoined applies one write request (api.series_append_requests' request object, made by
// seriesRequest) through the joiner: its row, or the error it was refused with.
func (s *server) seriesJoined(ctx context.Context, access string, body []byte, key *string) (db.SeriesAppendRequestsRow, error) {
	req := writeRequest{body: body, field: "append", scope: "account:" + access, key: key}
	rows, err := s.seriesJoin.do(ctx, struct{}{}, "", req)
	if err == nil && len(rows) != 1 {
		err = fmt.Errorf("a series write returned %d rows for one request", len(rows))
	}
	if err != nil {
		return db.SeriesAppendRequestsRow{}, err
	}
	if rows[0].SQLState != "" {
		e := refusal(&rows[0].SQLState, &rows[0].Reason)
		e.Detail, e.Hint = rows[0].Detail, rows[0].Hint
		return db.SeriesAppendRequestsRow{}, e
	}
	return rows[0], nil
}

// seriesWrite applies one write request through the joiner and answers it.
func (s *server) seriesWrite(w http.ResponseWriter, r *http.Request, access string, body []byte) {
	row, err := s.seriesJoined(r.Context(), access, body, idempotencyKey(r.Header))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if row.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(row.Answer)
}

// seriesColumnsWrite writes and answers a body as typed columns when it can be carried so
// (seriesTryColumns), and tells whether it did.
func (s *server) seriesColumnsWrite(w http.ResponseWriter, r *http.Request, access, event string, body []byte) bool {
	handled, err := s.seriesTryColumns(r.Context(), access, event, body, idempotencyKey(r.Header))
	if !handled {
		return false
	}
	if err != nil {
		s.fail(w, r, err)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"status": "ok"}`))
	return true
}

// seriesRequest is the request object of api.series_append_requests: the access, the event (or
// none for a batch) and the body as it came, not decoded again.
func seriesRequest(access, event, member string, body []byte) []byte {
	a, _ := json.Marshal(access) // strings always marshal
	out := make([]byte, 0, len(body)+96)
	out = append(out, `{"access":`...)
	out = append(out, a...)
	if event != "" || member == "data" {
		e, _ := json.Marshal(event)
		out = append(out, `,"event":`...)
		out = append(out, e...)
	}
	out = append(out, `,"`+member+`":`...)
	out = append(out, body...)
	return append(out, '}')
}

// seriesAppend is POST /{username}/events/{id}/series: flatJSON, or CSV (Content-Type text/csv,
// header row = fields).
func (s *server) seriesAppend(w http.ResponseWriter, r *http.Request) {
	access, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	var body []byte
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "text/csv" {
		raw, ok := s.readRaw(w, r)
		if !ok {
			return
		}
		flat, err := seriesCSV(raw)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid-request-structure", err.Error(), nil)
			return
		}
		body = flat
	} else if body, ok = s.readSeriesBody(w, r, access, r.PathValue("id")); !ok {
		return
	}
	s.seriesWrite(w, r, access, seriesRequest(access, r.PathValue("id"), "data", body))
}

// seriesBatch is POST /{username}/series/batch: seriesBatch, all or nothing.
func (s *server) seriesBatch(w http.ResponseWriter, r *http.Request) {
	access, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	body, ok := s.readSeriesBody(w, r, access, "")
	if !ok {
		return
	}
	s.seriesWrite(w, r, access, seriesRequest(access, "", "batch", body))
}

// readSeriesBody reads a JSON series write (a flatJSON body for event, or a seriesBatch for event
// "") and writes it as typed columns when it can be read so (seriesColumnsWrite). ok is true when
// the body is left to the flatJSON way: valid JSON, in body. A body the typed reader took is not
// read by json.Valid (seriesTryColumns); any other body gets readBody's checks and their answers.
func (s *server) readSeriesBody(w http.ResponseWriter, r *http.Request, access, event string) (body []byte, ok bool) {
	body, err := readLimited(w, r, s.maxBody)
	if err != nil {
		s.bodyReadError(w, err)
		return nil, false
	}
	if s.seriesColumnsWrite(w, r, access, event, body) {
		return nil, false
	}
	return body, s.checkJSONBody(w, body)
}

// readRaw reads a body that is not JSON (CSV), within the size limit, as UTF-8 without NUL.
func (s *server) readRaw(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := readLimited(w, r, s.maxBody)
	if err != nil {
		s.bodyReadError(w, err)
		return nil, false
	}
	return body, true
}

// seriesRange reads the range parameters of a read or delete: fromTime/toTime (seconds since the
// epoch, the seed) or fromDeltaTime/toDeltaTime (seconds after the event's time, Pryv as shipped),
// not both kinds.
func seriesRange(q url.Values) (from, to *float64, relative bool, err error) {
	fromAbs, err := floatParam(q, "fromTime")
	if err != nil {
		return nil, nil, false, err
	}
	toAbs, err := floatParam(q, "toTime")
	if err != nil {
		return nil, nil, false, err
	}
	fromRel, err := floatParam(q, "fromDeltaTime")
	if err != nil {
		return nil, nil, false, err
	}
	toRel, err := floatParam(q, "toDeltaTime")
	if err != nil {
		return nil, nil, false, err
	}
	abs, rel := fromAbs != nil || toAbs != nil, fromRel != nil || toRel != nil
	if abs && rel {
		return nil, nil, false, errors.New("give fromTime/toTime (seconds since the epoch) or fromDeltaTime/toDeltaTime (seconds after the event's time), not both")
	}
	from, to, relative = fromRel, toRel, !abs
	if abs {
		from, to = fromAbs, toAbs
	}
	if from != nil && to != nil && *to < *from {
		return nil, nil, false, fmt.Errorf("the range ends (%v) before it starts (%v)", *to, *from)
	}
	return from, to, relative, nil
}

// seriesGet is GET /{username}/events/{id}/series: flatJSON (or CSV with Accept: text/csv), read
// in one repeatable-read transaction, page by page, each page written as it comes.
func (s *server) seriesGet(w http.ResponseWriter, r *http.Request) {
	access, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	from, to, relative, err := seriesRange(q)
	if err != nil {
		badParam(w, err)
		return
	}
	fields, err := listParam(q, "fields")
	if err != nil {
		badParam(w, err)
		return
	}
	if len(fields) == 1 && strings.Contains(fields[0], ",") {
		fields = strings.Split(fields[0], ",")
	}
	timeField := "deltaTime"
	if !relative {
		timeField = "timestamp"
	}
	id := r.PathValue("id")
	if q.Has("interval") || q.Has("aggregate") {
		s.seriesDownsample(w, r, access, id, from, to, relative, fields, timeField)
		return
	}
	format := "json"
	if acceptsCSV(r.Header.Get("Accept")) {
		format = "csv"
	}
	ctx := r.Context()
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer func() { _ = tx.Rollback(ctx) }()
	qt := db.New(timedDB{DBTX: tx, m: s.metrics})
	cols, err := qt.SeriesColumns(ctx, db.SeriesColumnsParams{AccessID: access, EventID: id, Fields: fields, TimeField: timeField})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := int32(seriesPage)
	p := db.SeriesReadColumnsParams{AccessID: access, EventID: id, FromTime: from, ToTime: to, Relative: relative,
		Fields: fields, TimeField: timeField, MaxPoints: &limit}
	page, err := qt.SeriesReadColumns(ctx, p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	csv := format == "csv"
	buf := make([]byte, 0, 64<<10)
	if csv {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		buf = append(buf, csvLine(cols)...)
	} else {
		w.Header().Set("Content-Type", "application/json")
		c, _ := json.Marshal(cols) // strings always marshal
		buf = append(buf, `{"format":"flatJSON","fields":`...)
		buf = append(buf, c...)
		buf = append(buf, `,"points":[`...)
	}
	w.WriteHeader(http.StatusOK)
	// From here the answer streams: the header is out, and meta is written where the body ends.
	http.NewResponseController(w).Flush() //nolint:errcheck // a writer that cannot flush sends it all at the end
	// The next page is read while this one is formatted and sent: PostgreSQL and the shell work
	// at once.
	pages := make(chan db.SeriesReadColumnsRow, 1)
	fctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(pages)
		for {
			select {
			case pages <- page:
			case <-fctx.Done():
				return
			}
			if page.Points < seriesPage {
				return
			}
			after := page.LastAt
			p.After = &after
			var err error
			if page, err = qt.SeriesReadColumns(fctx, p); err != nil {
				if fctx.Err() == nil {
					// The status is sent: the body stops short, which the client sees as invalid JSON.
					s.log.Error("series read failed while streaming", "path", r.URL.Path, "err", err)
				}
				cancel()
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range pages { // the reader is done with the transaction before it is rolled back
		}
	}()
	first := true
	for page := range pages {
		pc := seriesPageColumns(page)
		for i := range int(page.Points) {
			if !csv && !first {
				buf = append(buf, ',')
			}
			first = false
			buf = pc.appendPoint(buf, i, csv)
			if len(buf) >= 60<<10 {
				if _, err := w.Write(buf); err != nil {
					return // the client went away
				}
				buf = buf[:0]
			}
		}
	}
	if fctx.Err() != nil {
		return // the read failed: the body stops short
	}
	if !csv {
		buf = append(buf, `],"meta":`...)
		buf = append(buf, accountMeta(time.Now())...)
		buf = append(buf, "}\n"...)
	}
	_, _ = w.Write(buf)
}

// seriesDownsample answers a GET with interval (seconds) and aggregate (avg by default): one point
// per bucket, in flatJSON.
func (s *server) seriesDownsample(w http.ResponseWriter, r *http.Request, access, id string, from, to *float64,
	relative bool, fields []string, timeField string) {
	q := r.URL.Query()
	interval, err := floatParam(q, "interval")
	if err == nil && interval == nil {
		err = errors.New("query parameter interval (seconds) is required with aggregate")
	}
	if err != nil {
		badParam(w, err)
		return
	}
	aggregate := "avg"
	if q.Has("aggregate") {
		aggregate = q.Get("aggregate")
	}
	out, err := s.q.SeriesDownsample(r.Context(), db.SeriesDownsampleParams{AccessID: access, EventID: id, IntervalSeconds: *interval,
		Aggregate: aggregate, FromTime: from, ToTime: to, Relative: relative, Fields: fields, TimeField: timeField})
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

// seriesDelete is DELETE /{username}/events/{id}/series: the points of a range (every point
// without one); the event stays.
func (s *server) seriesDelete(w http.ResponseWriter, r *http.Request) {
	access, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	from, to, relative, err := seriesRange(r.URL.Query())
	if err != nil {
		badParam(w, err)
		return
	}
	out, err := s.q.SeriesDelete(r.Context(), db.SeriesDeleteParams{AccessID: access, EventID: r.PathValue("id"),
		FromTime: from, ToTime: to, Relative: relative})
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

// acceptsCSV tells whether an Accept header asks for CSV before JSON.
func acceptsCSV(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
		switch mt {
		case "text/csv":
			return true
		case "application/json":
			return false
		}
	}
	return false
}
