package server

import "net/http"

// SQLSTATEs of the purge (sql/purge/). The generic codes it raises as well: SLINV (a bad time,
// limit or execution date, 400), SLNFD (no report for that date, 404).
func init() {
	// A purge configuration that is not an object, has an unknown key, or a value of the wrong
	// type or range.
	registerError("SPCFG", http.StatusBadRequest, "invalid-purge-configuration")
	// A retention-period or frequency that is no period of its kind.
	registerError("SPPER", http.StatusBadRequest, "invalid-period")
	// A STANDARD batch asked of a day that runs in TTL mode, or the other way round.
	registerError("SPMOD", http.StatusConflict, "purge-mode-mismatch")
}
