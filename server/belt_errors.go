package server

import "net/http"

// SQLSTATEs of the belt domain (sql/belt/). The generic codes the belt API raises as well: SLINV
// (an invalid belt document or action, 400), SLNFD (no such belt, 404), SLCNF ("<name> exists
// already", 409).
func init() {
	// A Python belt (extractorFn) on a database without PL/Python (plpython3u): the server cannot
	// run Python callbacks; SQL belts (sqlCallback) work.
	registerError("SBPYN", http.StatusNotImplemented, "python-belts-unavailable")
	// Raised by a SQL callback (api.belt_retry) to have its event retried with back-off; handled by
	// the processing step, it reaches a client only from a callback called by hand.
	registerError("SBRTY", http.StatusServiceUnavailable, "belt-retry-requested")
	// The code of a dead letter whose retries ran out (RETRY_MAX_RETRIES).
	registerError("SBRTX", http.StatusUnprocessableEntity, "belt-retries-exhausted")
}
