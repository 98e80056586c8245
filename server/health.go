package server

import (
	"context"
	"net/http"
	"time"
)

// GET /healthz: the process answers.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.version})
}

// GET /readyz: the database answers and is migrated.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var one int
	if err := s.pool.QueryRow(ctx, `SELECT 1 FROM silo.api_code WHERE to_regnamespace('api') IS NOT NULL`).Scan(&one); err != nil {
		writeError(w, http.StatusServiceUnavailable, "not-ready", "database not reachable or not migrated", nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
