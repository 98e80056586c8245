package server

import "net/http"

// SQLSTATEs of the operational data store (sql/ods/). They come back per item in the answers of
// POST /ods/process-flow-events and POST /ods/objects (a refused item costs the others nothing);
// a client meets them as errors only from psql. The generic codes it raises as well: SLINV (a body
// that is neither an object nor an array, 400), SLNFD (no such unit of work, 404).
func init() {
	// An event or object breaks a rule of its shape (unitOfWorkId, id, kind, type, payload,
	// journeyType, ttl).
	registerError("SOINV", http.StatusUnprocessableEntity, "invalid-ods-item")
	// A process-flow event without a global status, or with one ods.global_statuses does not list.
	registerError("SOSTA", http.StatusUnprocessableEntity, "unknown-global-status")
	// A createdAt that is no ISO-8601 date-time or epoch milliseconds from 1970 to 9999.
	registerError("SOTIM", http.StatusUnprocessableEntity, "invalid-ods-time")
}
