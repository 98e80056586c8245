package server

import "net/http"

// The series routes raise the account domain's SQLSTATEs (server/account_errors.go: Pryv's ids and
// statuses). One more reaches them from PostgreSQL itself: a JSON number beyond numeric's range
// (1e1000000 is valid JSON) fails when the body is read as jsonb. That is the client's number,
// not a server fault.
func init() {
	registerError("22003", http.StatusBadRequest, "invalid-parameters-format") // numeric_value_out_of_range (a number too large)
}
