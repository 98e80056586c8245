package server

import "net/http"

// SQLSTATEs of change notifications (sql/change/).
func init() {
	registerError("SCEXP", http.StatusGone, "change-log-expired") // resume position older than the change log keeps (change_retention)
}
