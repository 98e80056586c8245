package server

import "net/http"

// SQLSTATEs of accounts (sql/account/), answered with Pryv's error ids and HTTP statuses, so a
// Pryv client reads Silo's errors as it reads Pryv's.
func init() {
	registerError("SASTR", http.StatusBadRequest, "invalid-request-structure")   // a body that is not a JSON object
	registerError("SAINV", http.StatusBadRequest, "invalid-parameters-format")   // a property of the wrong shape, an unknown property, a bad id
	registerError("SAUSR", http.StatusBadRequest, "invalid-parameters-format")   // a username that breaks Pryv's rule or is reserved
	registerError("SAOPR", http.StatusBadRequest, "invalid-operation")           // a change a series event does not allow
	registerError("SATYP", http.StatusBadRequest, "invalid-event-type")          // series:{type} with a type outside the catalogue
	registerError("SAREF", http.StatusBadRequest, "unknown-referenced-resource") // a stream or parent that does not exist
	registerError("SAHDR", http.StatusUnauthorized, "missing-header")            // no access token
	registerError("SAAUT", http.StatusForbidden, "invalid-access-token")         // an unknown, deleted or other user's token
	registerError("SAFRB", http.StatusForbidden, "forbidden")                    // the access lacks the permission
	registerError("SANFD", http.StatusNotFound, "unknown-resource")              // an unknown user or event
	registerError("SACNF", http.StatusConflict, "item-already-exists")           // an id, name or username that is taken
}
