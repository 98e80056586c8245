package server

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The SQLSTATE → HTTP table: how an SQLSTATE raised by Silo's SQL reaches an HTTP client (and the
// terminal of a CLI command). PostgREST keeps the same mapping in its HTTP layer.

// errorDef describes how an SQLSTATE raised by Silo's SQL reaches an HTTP client.
type errorDef struct {
	Code   string // SQLSTATE, five characters
	Status int    // HTTP status
	ID     string // stable error id, kebab-case
}

var (
	registryMu sync.RWMutex
	registry   = map[string]errorDef{}
)

// registerError adds an SQLSTATE to the registry. Each domain's <domain>_errors.go calls it from init.
func registerError(code string, status int, id string) {
	if len(code) != 5 {
		panic("SQLSTATE must have five characters: " + code)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[code]; dup {
		panic("SQLSTATE registered twice: " + code)
	}
	registry[code] = errorDef{Code: code, Status: status, ID: id}
}

// lookupError returns the registered definition of an SQLSTATE.
func lookupError(code string) (errorDef, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	d, ok := registry[code]
	return d, ok
}

// APIError is an expected failure raised by the SQL layer, ready for an HTTP response.
type APIError struct {
	Status  int
	ID      string
	Message string
	Data    map[string]any
}

func (e *APIError) Error() string { return e.ID + ": " + e.Message }

// ErrorFor interprets an error from a query: a registered SQLSTATE becomes an *APIError with its
// status, id, the PostgreSQL message, and the DETAIL and HINT in Data. ok is false for anything
// else (an unexpected error: the caller answers 500 and logs it). pgx.ErrNoRows is interpreted
// here, in one place, as unknown-resource.
func ErrorFor(err error) (*APIError, bool) {
	if err == nil {
		return nil, false
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return &APIError{Status: http.StatusNotFound, ID: "unknown-resource", Message: "not found"}, true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, false
	}
	def, ok := lookupError(pgErr.Code)
	if !ok {
		return nil, false
	}
	data := map[string]any{"sqlstate": pgErr.Code}
	if pgErr.Detail != "" {
		data["detail"] = pgErr.Detail
	}
	if pgErr.Hint != "" {
		data["hint"] = pgErr.Hint
	}
	return &APIError{Status: def.Status, ID: def.ID, Message: pgErr.Message, Data: data}, true
}

// Database trouble: the request was fine, but the database could not serve it now (it restarts,
// the network dropped the connection, it has no free connection slot). That is a 503 with
// Retry-After, never a 500: the client should send the same request again shortly, and the pool
// reconnects by itself (pgxpool drops a broken connection and dials a new one on the next
// acquire).
const (
	// UnavailableID is the error id of database trouble.
	UnavailableID = "database-unavailable"
	// UnavailableRetryAfter is the Retry-After of database trouble, in seconds.
	UnavailableRetryAfter = 1
)

// DatabaseUnavailable tells whether err is database trouble rather than a failure of the request
// itself, and if so returns a message for the client saying what happened, without internals:
//   - SQLSTATE class 08 (connection exception);
//   - 57P01, 57P02, 57P03 (admin shutdown, crash shutdown, cannot connect now: a restart);
//   - class 53 (insufficient resources: 53300 too many connections, out of memory, disk full);
//   - 55P03 (lock not available: a lock timeout) and class 58 (system errors such as I/O);
//   - a connection attempt that failed (pgconn.ConnectError), a connection that broke or was
//     already closed (a net.Error, an unexpected EOF, pgconn.ErrConnClosed);
//   - a deadline that passed while waiting for the database (no connection came free in time).
//
// Registered SQLSTATEs (errors.go's registry: 40001, 40P01 and 57014 among them, 503 with their
// own ids) are answered by ErrorFor. Together the two cover every transient SQLSTATE of
// api.error_class with a 503 and Retry-After (a test holds them to it): a client retries exactly
// what the workers retry.
func DatabaseUnavailable(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	var netErr net.Error
	isPg := errors.As(err, &pgErr) // also a refusal inside a ConnectError (53300 too many clients)
	switch {
	case isPg && strings.HasPrefix(pgErr.Code, "08"):
		return "the connection to the database was lost; retry later", true
	case isPg && (pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"):
		return "the database is starting, restarting or shutting down; retry later", true
	case isPg && strings.HasPrefix(pgErr.Code, "53"):
		return "the database is out of resources (connections, memory or disk); retry later", true
	case isPg && pgErr.Code == "55P03":
		return "a lock the request needs was not available in time; retry later", true
	case isPg && strings.HasPrefix(pgErr.Code, "58"):
		return "the database met a system error (such as I/O); retry later", true
	case errors.As(err, &connErr):
		return "the database cannot be reached; retry later", true
	case isPg:
		return "", false // the database answered: the request's own failure
	case errors.Is(err, context.DeadlineExceeded):
		return "the database did not answer in time; retry later", true
	case errors.As(err, &netErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, pgconn.ErrConnClosed):
		return "the connection to the database was lost; retry later", true
	}
	return "", false
}

func init() {
	// Silo's generic codes, used by every domain.
	registerError("SLINV", http.StatusBadRequest, "invalid-request-structure")
	registerError("SLAUT", http.StatusUnauthorized, "invalid-access-token")
	registerError("SLFRB", http.StatusForbidden, "forbidden")
	registerError("SLNFD", http.StatusNotFound, "unknown-resource")
	registerError("SLCNF", http.StatusConflict, "item-already-exists")
	// PostgreSQL's own codes for input the server could not even read.
	registerError("22P02", http.StatusBadRequest, "invalid-parameters-format") // invalid_text_representation (bad JSON)
	registerError("22023", http.StatusBadRequest, "invalid-parameters-format") // invalid_parameter_value
	registerError("22021", http.StatusBadRequest, "invalid-parameters-format") // character_not_in_repertoire (not UTF-8)
	registerError("54000", http.StatusRequestEntityTooLarge, "too-large")      // program_limit_exceeded
	registerError("40P01", http.StatusServiceUnavailable, "concurrent-update") // deadlock_detected (after retries)
	registerError("40001", http.StatusServiceUnavailable, "concurrent-update") // serialization_failure (after retries)
	registerError("57014", http.StatusServiceUnavailable, "request-timeout")   // query_canceled (statement timeout)
}

// registeredID tells whether id is the error id of a registered SQLSTATE (or unknown-resource).
func registeredID(id string) bool {
	if id == "unknown-resource" {
		return true
	}
	registryMu.RLock()
	defer registryMu.RUnlock()
	for _, d := range registry {
		if d.ID == id {
			return true
		}
	}
	return false
}
