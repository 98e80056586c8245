package server

import "net/http"

// SQLSTATEs of idempotency keys (sql/idempotency/), shared by every write route that takes the
// Idempotency-Key header.
func init() {
	registerError("SLIDK", http.StatusBadRequest, "invalid-idempotency-key")         // empty, over 255 characters, not printable ASCII
	registerError("SLIDM", http.StatusUnprocessableEntity, "idempotency-key-reused") // used within the window for another request or body
}
