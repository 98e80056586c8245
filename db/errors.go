package db

import (
	"errors"
	"net/http"
	"sort"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrorDef describes how an SQLSTATE raised by Silo's SQL reaches an HTTP client.
type ErrorDef struct {
	Code   string // SQLSTATE, five characters
	Status int    // HTTP status
	ID     string // stable error id, kebab-case
}

var (
	registryMu sync.RWMutex
	registry   = map[string]ErrorDef{}
)

// RegisterError adds an SQLSTATE to the registry. Domain files call it from init.
func RegisterError(code string, status int, id string) {
	if len(code) != 5 {
		panic("SQLSTATE must have five characters: " + code)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[code]; dup {
		panic("SQLSTATE registered twice: " + code)
	}
	registry[code] = ErrorDef{Code: code, Status: status, ID: id}
}

// LookupError returns the registered definition of an SQLSTATE.
func LookupError(code string) (ErrorDef, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	d, ok := registry[code]
	return d, ok
}

// RegisteredErrors lists the registry sorted by code.
func RegisteredErrors() []ErrorDef {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]ErrorDef, 0, len(registry))
	for _, d := range registry {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
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
	def, ok := LookupError(pgErr.Code)
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

func init() {
	// Silo's generic codes, used by every domain.
	RegisterError("SLINV", http.StatusBadRequest, "invalid-request-structure")
	RegisterError("SLAUT", http.StatusUnauthorized, "invalid-access-token")
	RegisterError("SLFRB", http.StatusForbidden, "forbidden")
	RegisterError("SLNFD", http.StatusNotFound, "unknown-resource")
	RegisterError("SLCNF", http.StatusConflict, "item-already-exists")
	// PostgreSQL's own codes for input the server could not even read.
	RegisterError("22P02", http.StatusBadRequest, "invalid-parameters-format") // invalid_text_representation (bad JSON)
	RegisterError("22023", http.StatusBadRequest, "invalid-parameters-format") // invalid_parameter_value
	RegisterError("22021", http.StatusBadRequest, "invalid-parameters-format") // character_not_in_repertoire (not UTF-8)
	RegisterError("54000", http.StatusRequestEntityTooLarge, "too-large")      // program_limit_exceeded
	RegisterError("40P01", http.StatusServiceUnavailable, "concurrent-update") // deadlock_detected (after retries)
	RegisterError("40001", http.StatusServiceUnavailable, "concurrent-update") // serialization_failure (after retries)
	RegisterError("57014", http.StatusServiceUnavailable, "request-timeout")   // query_canceled (statement timeout)
}
