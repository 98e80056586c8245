package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/silo-db/silo/db"
)

// updateResult is one element of POST /profile-updates' "results".
type updateResult struct {
	Status string       `json:"status"`
	Error  *errorObject `json:"error,omitempty"`
}

func newUpdateResult(status string, sqlstate, reason *string, deadLetterID *int64) updateResult {
	res := updateResult{Status: status}
	if status != "dead_letter" {
		return res
	}
	e := &errorObject{ID: "invalid-profile-update", Data: map[string]any{}}
	if sqlstate != nil {
		e.Data["sqlstate"] = *sqlstate
		if def, ok := lookupError(*sqlstate); ok {
			e.ID = def.ID
		}
	}
	if reason != nil {
		e.Message = *reason
	}
	if deadLetterID != nil {
		e.Data["deadLetterId"] = *deadLetterID
	}
	res.Error = e
	return res
}

// POST /profile-updates: one update or an array of them, applied in order. The results are told
// as the token may see them: api.profile_apply_requests gets its readers, so a result says nothing
// of a grain the token may not read (ok rather than noop, no existing grain type in a rejection).
// With an Idempotency-Key header, a repeat of a request within the window gets the first answer
// (Idempotent-Replayed: true) and applies nothing.
func (s *server) profileUpdates(w http.ResponseWriter, r *http.Request) {
	id, ok := s.writer(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	req := writeRequest{body: body, field: "updates", tokenID: id.TokenID, key: idempotencyKey(r.Header)}
	if mode := r.URL.Query().Get("mode"); mode == "async" {
		s.profileEnqueue(w, r, req)
		return
	} else if mode != "" && mode != "sync" {
		badParam(w, fmt.Errorf("mode must be sync or async, got %q", mode))
		return
	}
	// Requests of tokens with the same readers are joined (group commit).
	rows, err := s.applyJoin.do(r.Context(), id.Readers, strings.Join(id.Readers, "\x00"), req)
	if err == nil && len(rows) == 1 && rows[0].Status == "refused" {
		err = refusal(rows[0].SQLState, rows[0].Reason)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		Results []updateResult `json:"results"`
	}{Results: make([]updateResult, len(rows))}
	for i, row := range rows {
		out.Results[i] = newUpdateResult(row.Status, row.SQLState, row.Reason, row.DeadLetterID)
		if row.Replayed {
			w.Header().Set("Idempotent-Replayed", "true")
			continue // counted when it was applied
		}
		op := "invalid"
		if row.Operation != nil {
			op = *row.Operation
		}
		s.metrics.updates.WithLabelValues(op, row.Status).Inc()
	}
	writeJSON(w, http.StatusOK, out)
}

// profileDoc is the response of the profile reads (Granary's shape).
type profileDoc struct {
	CorrelationID      string          `json:"correlationId"`
	Type               string          `json:"type"`
	JSONPayload        json.RawMessage `json:"jsonPayload"`
	TotalGrainVersions *int32          `json:"totalGrainVersions,omitempty"`
	Links              map[string]any  `json:"_links,omitempty"`
}

// GET /profiles/{profileType}/{correlationId}
func (s *server) profileGet(w http.ResponseWriter, r *http.Request) {
	id, ok := s.identity(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	withHistory, err1 := boolParam(q, "withHistory", true)
	resolve, err2 := boolParam(q, "resolveProfileLinks", false)
	if err := errors.Join(err1, err2); err != nil {
		badParam(w, err)
		return
	}
	var fragments []string
	if f := q.Get("fragments"); f != "" {
		for _, p := range strings.Split(f, ",") {
			if p = strings.TrimSpace(p); p != "" {
				fragments = append(fragments, p)
			}
		}
	}
	row, err := s.q.ProfileGet(r.Context(), db.ProfileGetParams{
		ProfileType: r.PathValue("profileType"), CorrelationID: r.PathValue("correlationId"),
		Fragments: fragments, WithHistory: withHistory, ResolveLinks: resolve, Readers: id.Readers,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileDoc{CorrelationID: row.CorrelationID, Type: row.ProfileType, JSONPayload: row.JSONPayload})
}

// GET /profiles/{profileType}/{correlationId}/grain/{path...}
func (s *server) profileGrainGet(w http.ResponseWriter, r *http.Request) {
	id, ok := s.identity(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	withHistory, err1 := boolParam(q, "withHistory", true)
	resolve, err2 := boolParam(q, "resolveProfileLinks", false)
	pageSize, err3 := intParam(q, "pageSize", 250, 1, 250)
	offset, err4 := intParam(q, "offset", 0, 0, 1<<30)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		badParam(w, err)
		return
	}
	row, err := s.q.ProfileGrainGet(r.Context(), db.ProfileGrainGetParams{
		ProfileType: r.PathValue("profileType"), CorrelationID: r.PathValue("correlationId"),
		Path: r.PathValue("path"), WithHistory: withHistory, PageSize: int32(pageSize),
		PageOffset: int32(offset), ResolveLinks: resolve, Readers: id.Readers,
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page := func(off int) map[string]string {
		u := *r.URL
		v := u.Query()
		v.Set("pageSize", strconv.Itoa(pageSize))
		v.Set("offset", strconv.Itoa(off))
		v.Set("withHistory", strconv.FormatBool(withHistory))
		u.RawQuery = v.Encode()
		return map[string]string{"href": u.RequestURI()}
	}
	links := map[string]any{"self": page(offset)}
	if offset+pageSize < int(row.TotalGrainVersions) {
		links["next"] = page(offset + pageSize)
	}
	total := row.TotalGrainVersions
	writeJSON(w, http.StatusOK, profileDoc{CorrelationID: row.CorrelationID, Type: row.ProfileType,
		JSONPayload: row.JSONPayload, TotalGrainVersions: &total, Links: links})
}

// GET /dead-letters (admin)
func (s *server) deadLetterList(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	q := r.URL.Query()
	opt := func(name string) *string {
		if v := q.Get(name); v != "" {
			return &v
		}
		return nil
	}
	limit, err := intParam(q, "limit", 100, 1, 1000)
	if err != nil {
		badParam(w, err)
		return
	}
	afterID, err := intParam(q, "afterId", 0, 0, 1<<62)
	if err != nil {
		badParam(w, err)
		return
	}
	var resolved *bool
	if q.Get("resolved") != "" {
		b, err := boolParam(q, "resolved", false)
		if err != nil {
			badParam(w, err)
			return
		}
		resolved = &b
	}
	rows, err := s.q.ProfileDeadLetterList(r.Context(), db.ProfileDeadLetterListParams{
		CorrelationID: opt("correlationId"), ProfileType: opt("profileType"), Operation: opt("operation"),
		SQLState: opt("sqlstate"), Resolved: resolved, AfterID: int64(afterID), MaxRows: int32(limit),
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := struct {
		DeadLetters []db.ProfileDeadLetter `json:"deadLetters"`
		NextAfterID *int64                 `json:"nextAfterId"`
	}{DeadLetters: rows}
	if out.DeadLetters == nil {
		out.DeadLetters = []db.ProfileDeadLetter{}
	}
	if len(rows) == limit {
		last := rows[len(rows)-1].ID
		out.NextAfterID = &last
	}
	writeJSON(w, http.StatusOK, out)
}

// POST /dead-letters/{id}/replay (admin)
func (s *server) deadLetterReplay(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		badParam(w, fmt.Errorf("dead letter id must be a positive integer, not %q", r.PathValue("id")))
		return
	}
	row, err := s.q.ProfileDeadLetterReplay(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newUpdateResult(row.Status, row.SQLState, row.Reason, &row.DeadLetterID))
}
