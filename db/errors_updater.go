package db

import "net/http"

// SQLSTATEs of the asynchronous profile updater (sql/040_profile_updater.sql).
func init() {
	// Not raised: the code of a dead letter made by api.profile_inbox_dead_letter, an inbox message
	// an operator moved to the dead letter table instead of letting it block its lane.
	RegisterError("SPSKP", http.StatusUnprocessableEntity, "profile-update-skipped")
}
