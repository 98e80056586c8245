package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/silo-db/silo/db"
)

// The job service's routes: POST /job-events (tokens that may write) and the jobs, their states
// and counters (admin tokens: a job carries its event's payload). The rules are the SQL's
// (sql/job/).

// jobEventResult is the answer for one event of POST /job-events.
type jobEventResult struct {
	Status string       `json:"status"`
	JobIDs []int64      `json:"jobIds"`
	Topics []string     `json:"topics"`
	Error  *errorObject `json:"error,omitempty"`
}

// POST /job-events: one event or a JSON array of events. The answer is a JSON array with one result
// per event, in order: scheduled (with its jobs), unrouted or refused (with the error). Status:
// 200 when no event was refused, 207 when some were, 422 when all were; a request refused whole
// (an invalid or reused Idempotency-Key) is an error as elsewhere.
func (s *server) jobEvents(w http.ResponseWriter, r *http.Request) {
	id, ok := s.writer(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req := writeRequest{body: body, field: "events", tokenID: id.TokenID, key: idempotencyKey(r.Header)}
	rows, err := s.jobJoin.do(r.Context(), struct{}{}, "", req)
	if err == nil && len(rows) == 1 && deref(rows[0].Status) == "refused" && rows[0].Ord == nil {
		err = refusal(rows[0].SQLState, rows[0].Reason)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]jobEventResult, len(rows))
	refused := 0
	for i, row := range rows {
		out[i] = jobEventResult{Status: deref(row.Status), JobIDs: row.JobIds, Topics: row.Topics}
		if out[i].JobIDs == nil {
			out[i].JobIDs = []int64{}
		}
		if out[i].Topics == nil {
			out[i].Topics = []string{}
		}
		if out[i].Status == "refused" {
			refused++
			e := &errorObject{ID: "invalid-job-event", Message: deref(row.Reason), Data: map[string]any{}}
			if row.SQLState != nil {
				e.Data["sqlstate"] = *row.SQLState
			}
			out[i].Error = e
		}
		if row.Replayed != nil && *row.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	}
	writeJSON(w, perItemStatus(refused, len(rows)), out)
}

// newJobJoin is POST /job-events' joiner: concurrent small requests in one call (group commit).
func (s *server) newJobJoin() *joiner[struct{}, db.APIJobEventResult] {
	return newJoiner(func(ctx context.Context, _ struct{}, requests []byte) ([]db.APIJobEventResult, error) {
		return s.q.JobEventIngestRequests(ctx, requests)
	}, func(r db.APIJobEventResult) int32 {
		if r.Request == nil {
			return 0
		}
		return *r.Request
	})
}

// GET /jobs?state=&topic=&after=&limit=: {"jobs": [...], "next": id or null}.
func (s *server) jobList(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	q := r.URL.Query()
	limit, err1 := intParam(q, "limit", 100, 1, 1000)
	var after int64
	var err2 error
	if v := q.Get("after"); v != "" {
		after, err2 = strconv.ParseInt(v, 10, 64)
		if err2 != nil || after < 0 {
			err2 = fmt.Errorf("query parameter after must be a job id, not %q", v)
		}
	}
	if err := errors.Join(err1, err2); err != nil {
		badParam(w, err)
		return
	}
	page, err := s.q.JobList(r.Context(), db.JobListParams{State: optional(q.Get("state")), Topic: optional(q.Get("topic")),
		After: after, PageSize: int32(limit)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(page))
}

// GET /jobs/{id}
func (s *server) jobGet(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusNotFound, "unknown-resource", fmt.Sprintf("no job %q", r.PathValue("id")), nil)
		return
	}
	doc, err := s.q.JobGet(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(doc))
}

// GET /jobs/stats: {"topics": [{topic, scheduled, deduplicated, ...}]}.
func (s *server) jobStats(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	rows, err := s.q.JobStats(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rows == nil {
		rows = []db.APIJobStat{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"topics": rows})
}

func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
