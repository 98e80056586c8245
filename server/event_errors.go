package server

import "net/http"

// SQLSTATEs of the event store (sql/event/). An ingested event that breaks one of these rules is
// not raised to the caller: api.event_ingest answers it refused with the code, and the other events
// of the call go on. POST /events reports each refusal with the id below.
func init() {
	registerError("SEEVT", http.StatusUnprocessableEntity, "invalid-event")           // not an object, event_headers not an object, event_payload missing, an NDJSON line that is no JSON
	registerError("SEHDR", http.StatusUnprocessableEntity, "invalid-event-header")    // grnry-event-id, -type, -correlation-id missing or invalid; harvester name or type version not a string
	registerError("SETIM", http.StatusUnprocessableEntity, "invalid-event-timestamp") // grnry-event-timestamp neither epoch milliseconds nor ISO 8601, or out of range
}
