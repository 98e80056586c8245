package server

import "net/http"

// SQLSTATEs of the profile store's write path (sql/profile/). A profile update that breaks
// one of these rules is not raised to the caller: it goes to profile.dead_letters with its code,
// and api.profile_apply_batch reports the code per update. An HTTP layer that turns a rejected
// update into an error answers 422 with the id below.
func init() {
	registerError("SPMSG", http.StatusUnprocessableEntity, "invalid-profile-update")    // message not an object, _value not an object, _profile_type/_origin/_reader wrong, key too long
	registerError("SPOPR", http.StatusUnprocessableEntity, "unknown-profile-operation") // _operation not one of the 21 operations
	registerError("SPIDX", http.StatusUnprocessableEntity, "invalid-correlation-id")    // _id missing, not a string or empty
	registerError("SPPTH", http.StatusUnprocessableEntity, "invalid-grain-path")        // _path not an array of valid segments
	registerError("SPVAL", http.StatusUnprocessableEntity, "invalid-grain-value")       // _v null or not the shape its operation needs
	registerError("SPCRT", http.StatusUnprocessableEntity, "invalid-certainty")         // _c not a number in [0, 1]
	registerError("SPINS", http.StatusUnprocessableEntity, "invalid-insertion-time")    // _in negative, not whole, not a date, out of range
	registerError("SPDUR", http.StatusUnprocessableEntity, "invalid-duration")          // _ttl/_ttn (or _v of _set_ttl/_set_ttn) not a valid ISO 8601 duration
	registerError("SPTYP", http.StatusUnprocessableEntity, "grain-type-mismatch")       // the update's grain type differs from the existing grain's
	registerError("SPLNK", http.StatusUnprocessableEntity, "profile-link-cycle")        // _profile_link would create a cycle
	registerError("SPRSV", http.StatusUnprocessableEntity, "reserved-profile-type")     // profile type profile_link addressed by another operation
	// The asynchronous updater. Not raised: the code of a dead letter made by
	// api.profile_inbox_dead_letter, an inbox message an operator moved to the dead letter table
	// instead of letting it block its lane.
	registerError("SPSKP", http.StatusUnprocessableEntity, "profile-update-skipped")
}
