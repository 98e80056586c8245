package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/silo-db/silo/db"
)

// The operational data store over HTTP (sql/ods/): process-flow events and objects in, a unit of
// work whole out, and the archiver's call. The writes are joined into one call per batch of
// concurrent requests (join.go), each with its own Idempotency-Key; archiving is idempotent by
// itself (a repeat keeps the first archivedAt).

// odsResult is the answer for one event or object.
type odsResult struct {
	UnitOfWorkID *string      `json:"unitOfWorkId"`
	ObjectID     *string      `json:"id,omitempty"`
	Status       string       `json:"status"`
	Error        *errorObject `json:"error,omitempty"`
}

type odsJoiner = joiner[struct{}, db.OdsIngestRequestsRow]

func (s *server) odsRoutes(route func(pattern string, h http.HandlerFunc)) {
	events := newJoiner(func(ctx context.Context, _ struct{}, requests []byte) ([]db.OdsIngestRequestsRow, error) {
		return s.q.OdsIngestRequests(ctx, requests)
	}, func(r db.OdsIngestRequestsRow) int32 { return r.Request })
	objects := newJoiner(func(ctx context.Context, _ struct{}, requests []byte) ([]db.OdsIngestRequestsRow, error) {
		rows, err := s.q.OdsAppendRequests(ctx, requests)
		out := make([]db.OdsIngestRequestsRow, len(rows))
		for i, r := range rows {
			out[i] = db.OdsIngestRequestsRow(r)
		}
		return out, err
	}, func(r db.OdsIngestRequestsRow) int32 { return r.Request })
	route("POST /ods/process-flow-events", func(w http.ResponseWriter, r *http.Request) { s.odsWrite(w, r, events, "events") })
	route("POST /ods/objects", func(w http.ResponseWriter, r *http.Request) { s.odsWrite(w, r, objects, "objects") })
	route("GET /ods/unit-of-works/{id}", s.odsUnitOfWorkGet)
	route("POST /ods/unit-of-works/{id}/archive", s.odsUnitOfWorkArchive)
}

// POST /ods/process-flow-events and POST /ods/objects: one item or a JSON array of them. The
// answer is a JSON array with one result per item, in order: stored, duplicate or refused (with
// the error). Status: 200 when nothing was refused, 207 when some items were and others not, 422
// when every item was; a request refused whole (an invalid or reused Idempotency-Key) is an error.
func (s *server) odsWrite(w http.ResponseWriter, r *http.Request, join *odsJoiner, field string) {
	id, ok := s.writer(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req := writeRequest{body: body, field: field, tokenID: id.TokenID, key: idempotencyKey(r.Header)}
	rows, err := join.do(r.Context(), struct{}{}, "", req)
	if err == nil && len(rows) == 1 && rows[0].Status == "refused" && rows[0].Ord == nil {
		err = refusal(rows[0].SQLState, rows[0].Reason)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]odsResult, len(rows))
	refused := 0
	for i, row := range rows {
		out[i] = odsResult{UnitOfWorkID: row.UnitOfWorkID, ObjectID: row.ObjectID, Status: row.Status}
		if row.Status == "refused" {
			refused++
			out[i].ObjectID = nil
			out[i].Error = itemRefusal("invalid-ods-item", row.SQLState, row.Reason)
		}
		if row.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	}
	writeJSON(w, perItemStatus(refused, len(rows)), out)
}

// GET /ods/unit-of-works/{id}: the unit of work, its summary and its objects by kind.
func (s *server) odsUnitOfWorkGet(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.require(w, r, func(db.TokenAuthenticateRow) bool { return true }, ""); !ok {
		return
	}
	doc, err := s.q.OdsUnitOfWorkGet(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(doc))
}

// POST /ods/unit-of-works/{id}/archive: archivedAt set (kept when set already); the unit of work.
func (s *server) odsUnitOfWorkArchive(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.writer(w, r); !ok {
		return
	}
	doc, err := s.q.OdsUnitOfWorkArchive(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(doc))
}
