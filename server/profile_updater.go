package server

import (
	"fmt"
	"net/http"
)

// POST /profile-updates?mode=async[&priority=high|low]: the updates are accepted into the inbox of
// the asynchronous updater (api.profile_enqueue_requests, joined with concurrent requests of the
// same priority) and applied later, in order per _id. 202 with how many were accepted and their
// inbox ids; bad messages are dead-lettered when applied. With an Idempotency-Key header, a repeat
// within the window gets the first answer (Idempotent-Replayed: true) and enqueues nothing.
func (s *server) profileEnqueue(w http.ResponseWriter, r *http.Request, req writeRequest) {
	prio := r.URL.Query().Get("priority")
	if prio == "" {
		prio = "high"
	}
	rows, err := s.enqueueJoin.do(r.Context(), prio, prio, req)
	if err == nil && len(rows) == 1 && (rows[0].SQLState != nil || rows[0].Accepted == nil) {
		err = refusal(rows[0].SQLState, rows[0].Reason)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(rows) != 1 {
		s.fail(w, r, fmt.Errorf("an enqueue returned %d rows for one request", len(rows)))
		return
	}
	row := rows[0]
	if row.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusAccepted, struct {
		Accepted int32  `json:"accepted"`
		FirstID  *int64 `json:"firstId"`
		LastID   *int64 `json:"lastId"`
		Priority string `json:"priority"`
	}{*row.Accepted, row.FirstID, row.LastID, prio})
}
