package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// Only a real \u0000 escape is refused: after an escaped backslash the same six bytes are text.
func TestHasNULEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want bool
	}{
		{`{"_v":"a\u0000"}`, true},
		{`{"_v":"\u0000"}`, true},
		{`{"\u0000":1}`, true},
		{`{"_v":"C:\\u0000dir"}`, false},   // a backslash, then the text u0000
		{`{"_v":"C:\\\u0000dir"}`, true},   // a backslash, then U+0000
		{`{"_v":"C:\\\\u0000dir"}`, false}, // two backslashes, then text
		{`{"_v":"\\u0000 and \u0000"}`, true},
		{`{"_v":"\\u0000\\u0000"}`, false},
		{`{"_v":"\u00001"}`, true},
		{`{"_v":"\u0001"}`, false},
		{`{"_v":"u0000"}`, false},
		{`{}`, false},
	} {
		require.True(t, json.Valid([]byte(tc.body)), tc.body)
		require.Equal(t, tc.want, hasNULEscape([]byte(tc.body)), tc.body)
	}
}

// Database trouble is told apart from the request's own failures.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"} }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{pg("08006"), true}, // connection_failure
		{pg("08003"), true}, // connection_does_not_exist
		{pg("57P01"), true}, // admin_shutdown (a restart)
		{pg("57P02"), true}, // crash_shutdown
		{pg("57P03"), true}, // cannot_connect_now (starting up)
		{pg("53300"), true}, // too_many_connections
		{pg("53200"), true}, // out_of_memory
		{pg("53100"), true}, // disk_full
		{&pgconn.ConnectError{}, true},
		{fmt.Errorf("error doing x: %w", &pgconn.ConnectError{}), true},
		{fmt.Errorf("error doing x: %w", refused), true},
		{fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{context.DeadlineExceeded, true}, // no connection came free in time
		{nil, false},
		{pg("SLINV"), false},
		{pg("SLNFD"), false},
		{pg("57014"), false}, // statement timeout: registered, request-timeout
		{pg("40P01"), false},
		{pg("23505"), false},
		{pg("57000"), false},
		{pgx.ErrNoRows, false},
		{context.Canceled, false},
		{errors.New("boom"), false},
	} {
		msg, ok := DatabaseUnavailable(tc.err)
		require.Equal(t, tc.want, ok, "%v", tc.err)
		require.Equal(t, tc.want, msg != "", "%v", tc.err)
	}
}

// fail: database trouble is a 503 with Retry-After, a registered SQLSTATE keeps its status and
// id, anything else is still a 500.
func TestFail(t *testing.T) {
	t.Parallel()
	s := &server{log: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		err        error
		status     int
		id         string
		retryAfter string
	}{
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, 503, UnavailableID, "1"},
		{&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, 503, UnavailableID, "1"},
		{&pgconn.ConnectError{}, 503, UnavailableID, "1"},
		{&pgconn.PgError{Code: "SLINV", Message: "bad"}, 400, "invalid-request-structure", ""},
		{&pgconn.PgError{Code: "SLNFD", Message: "no such profile"}, 404, "unknown-resource", ""},
		{&pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}, 503, "request-timeout", "1"},
		{&pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}, 503, UnavailableID, "1"},
		{pgx.ErrNoRows, 404, "unknown-resource", ""},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, 500, "unexpected-error", ""},
		{errors.New("boom"), 500, "unexpected-error", ""},
	} {
		rec := httptest.NewRecorder()
		s.fail(rec, httptest.NewRequest(http.MethodGet, "/profiles/_d/x", nil), tc.err)
		require.Equal(t, tc.status, rec.Code, "%v", tc.err)
		require.Equal(t, tc.retryAfter, rec.Header().Get("Retry-After"), "%v", tc.err)
		var body errorBody
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		require.Equal(t, tc.id, body.Error.ID, "%v", tc.err)
		require.NotEmpty(t, body.Error.Message)
		if tc.status == 503 && tc.id == UnavailableID {
			require.NotContains(t, body.Error.Message, "SQLSTATE", "no internals")
			require.NotContains(t, body.Error.Message, "too many clients", "no internals")
		}
	}
}

// A client retries what the workers retry: every transient SQLSTATE of api.error_class
// (error_private.transient_rules) is a 503 with Retry-After, and a deterministic one is not.
func TestTransientErrorsAre503(t *testing.T) {
	t.Parallel()
	s := &server{log: slog.New(slog.DiscardHandler)}
	tx := dbtest.Tx(t)
	rows, err := tx.Query(context.Background(), `
		SELECT rpad(r.prefix, 5, '0') FROM error_private.transient_rules() r
		UNION ALL SELECT c FROM unnest('{08006,53300,57P01,58030}'::text[]) c`)
	require.NoError(t, err)
	codes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(codes), 10)
	for _, code := range append(codes, "22P02", "23505", "54000", "SLINV") {
		rec := httptest.NewRecorder()
		s.fail(rec, httptest.NewRequest(http.MethodPost, "/profile-updates", nil), &pgconn.PgError{Code: code, Message: "x"})
		var class string
		require.NoError(t, tx.QueryRow(context.Background(), `SELECT api.error_class($1)`, code).Scan(&class))
		if class == "transient" {
			require.Equal(t, 503, rec.Code, code)
			require.Equal(t, "1", rec.Header().Get("Retry-After"), code)
		} else {
			require.NotEqual(t, 503, rec.Code, code)
		}
	}
}
