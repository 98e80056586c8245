package db

import "net/http"

// SQLSTATEs of change notifications (sql/030_changes.sql).
func init() {
	RegisterError("SCEXP", http.StatusGone, "change-log-expired") // resume position older than the change log keeps (change_retention)
}
