package server

import (
	"net/http"

	"github.com/silo-db/silo/db"
)

// POST /profile-updates?mode=async[&priority=high|low]: the updates are accepted into the inbox of
// the asynchronous updater (api.profile_enqueue) and applied later, in order per _id. 202 with how
// many were accepted and their inbox ids; bad messages are dead-lettered when applied.
func (s *server) profileEnqueue(w http.ResponseWriter, r *http.Request, body []byte) {
	prio := r.URL.Query().Get("priority")
	if prio == "" {
		prio = "high"
	}
	row, err := s.q.ProfileEnqueue(r.Context(), db.ProfileEnqueueParams{Updates: body, Priority: prio})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, struct {
		Accepted int32  `json:"accepted"`
		FirstID  *int64 `json:"firstId"`
		LastID   *int64 `json:"lastId"`
		Priority string `json:"priority"`
	}{row.Accepted, row.FirstID, row.LastID, prio})
}
