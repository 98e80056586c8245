package server

import (
	"encoding/json"
	"net/http"

	"github.com/silo-db/silo/db"
)

// The purge over HTTP (sql/purge/): its reports for any valid token, its configuration for admins.
// Progress is published on the websocket channel purge (admins).

func (s *server) purgeRoutes(route func(pattern string, h http.HandlerFunc)) {
	route("GET /purge/reports", s.purgeReports)
	route("GET /purge/reports/{executionDate}", s.purgeReport)
	route("GET /purge/config", s.purgeConfig)
	route("PUT /purge/config", s.purgeConfigSet)
}

// GET /purge/reports?limit=&before=: the reports, newest first (limit 1 to 1000, default 30;
// before: an execution date, for the next page).
func (s *server) purgeReports(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.require(w, r, func(db.TokenAuthenticateRow) bool { return true }, ""); !ok {
		return
	}
	q := r.URL.Query()
	limit, err := intParam(q, "limit", 30, 1, 1000)
	if err != nil {
		badParam(w, err)
		return
	}
	p := db.PurgeReportsParams{PageLimit: int32(limit)}
	if b := q.Get("before"); b != "" {
		p.Before = &b
	}
	raw, err := s.q.PurgeReports(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(raw))
}

// GET /purge/reports/{executionDate}: 2023-05-17 or 2023-05-17T00:00:00.000Z.
func (s *server) purgeReport(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.require(w, r, func(db.TokenAuthenticateRow) bool { return true }, ""); !ok {
		return
	}
	raw, err := s.q.PurgeReport(r.Context(), r.PathValue("executionDate"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(raw))
}

// GET /purge/config (admins).
func (s *server) purgeConfig(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	raw, err := s.q.PurgeConfig(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(raw))
}

// PUT /purge/config (admins): the keys given replace their values; the new configuration.
func (s *server) purgeConfigSet(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	raw, err := s.q.PurgeConfigSet(r.Context(), body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(raw))
}
