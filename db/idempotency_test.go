package db_test

// Idempotency keys (sql/idempotency/) on the profile write routes: a request repeated with its key
// gets the first answer and applies nothing again; the same key with another request is refused;
// keys are per token; the key commits with the write or not at all.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

const incUpdate = `{"_id": "k1", "_path": ["n"], "_operation": "_inc", "_value": {"_v": "0|1|1"}}`

// request is one element of p_requests.
func request(updates string, tokenID int64, key string) string {
	r := fmt.Sprintf(`{"updates": %s, "token_id": %d`, updates, tokenID)
	if key != "" {
		k, _ := json.Marshal(key)
		r += `, "idempotency_key": ` + string(k)
	}
	return r + "}"
}

func applyRequests(t *testing.T, q *db.Queries, reqs ...string) []db.ProfileApplyRequestsRow {
	t.Helper()
	body := "["
	for i, r := range reqs {
		if i > 0 {
			body += ","
		}
		body += r
	}
	rows, err := q.ProfileApplyRequests(context.Background(), db.ProfileApplyRequestsParams{Requests: []byte(body + "]")})
	require.NoError(t, err)
	return rows
}

func counter(t *testing.T, tx db.DBTX, id string) string {
	t.Helper()
	var v string
	require.NoError(t, tx.QueryRow(context.Background(), `
		SELECT coalesce((SELECT value->>'_current' FROM profile.profilestore
		                 WHERE correlation_id = $1 AND path = '/n' AND pit = '_latest'), 'none')`, id).Scan(&v))
	return v
}

func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	first := applyRequests(t, q, request(incUpdate, 1, "key-1"))
	require.Len(t, first, 1)
	require.Equal(t, "ok", first[0].Status)
	require.False(t, first[0].Replayed)

	again := applyRequests(t, q, request(incUpdate, 1, "key-1"))
	require.Len(t, again, 1)
	require.True(t, again[0].Replayed)
	require.Equal(t, first[0].Status, again[0].Status)
	require.Equal(t, first[0].CorrelationID, again[0].CorrelationID)
	require.Equal(t, "1", counter(t, tx, "k1"), "applied once")

	// The same JSON written otherwise is the same request.
	spaced := `{ "_value": {"_v": "0|1|1"}, "_operation": "_inc", "_path": ["n"], "_id": "k1" }`
	require.True(t, applyRequests(t, q, request(spaced, 1, "key-1"))[0].Replayed)

	// Another token's key of the same name is its own.
	require.False(t, applyRequests(t, q, request(incUpdate, 2, "key-1"))[0].Replayed)
	require.Equal(t, "2", counter(t, tx, "k1"))

	// Without a key nothing is remembered.
	applyRequests(t, q, request(incUpdate, 1, ""))
	applyRequests(t, q, request(incUpdate, 1, ""))
	require.Equal(t, "4", counter(t, tx, "k1"))
}

func TestIdempotencyKeyWithAnotherRequestIsRefused(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	applyRequests(t, q, request(incUpdate, 1, "key-2"))
	other := `{"_id": "k1", "_path": ["n"], "_operation": "_inc", "_value": {"_v": "0|1|5"}}`
	rows := applyRequests(t, q, request(other, 1, "key-2"), request(incUpdate, 1, "key-3"))
	require.Len(t, rows, 2)
	require.Equal(t, "refused", rows[0].Status)
	require.Equal(t, "SLIDM", *rows[0].SQLState)
	require.Nil(t, rows[0].Ord)
	require.Equal(t, "ok", rows[1].Status, "a refused request costs the others nothing")
	require.Equal(t, "2", counter(t, tx, "k1"))

	// The same key and body on the async route is another request.
	enq, err := q.ProfileEnqueueRequests(context.Background(), db.ProfileEnqueueRequestsParams{
		Requests: []byte("[" + request(incUpdate, 1, "key-2") + "]"), Priority: "high"})
	require.NoError(t, err)
	require.Len(t, enq, 1)
	require.Equal(t, "SLIDM", *enq[0].SQLState)
	require.Nil(t, enq[0].Accepted)
}

func TestIdempotencyKeysAreChecked(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	for _, c := range []struct{ req, code string }{
		{`{"updates": ` + incUpdate + `, "idempotency_key": ""}`, "SLIDK"},
		{`{"updates": ` + incUpdate + `, "idempotency_key": "` + string(long) + `"}`, "SLIDK"},
		{`{"updates": ` + incUpdate + `, "idempotency_key": "caf\u00e9"}`, "SLIDK"},
		{`{"updates": ` + incUpdate + `, "idempotency_key": 7}`, "SLIDK"},
		{`{"updates": "x"}`, "SLINV"},
		{`{"other": []}`, "SLINV"},
		{`[1]`, "SLINV"},
		{`{"updates": [], "token_id": "7"}`, "SLINV"},
	} {
		rows := applyRequests(t, q, c.req)
		require.Len(t, rows, 1, c.req)
		require.Equal(t, "refused", rows[0].Status, c.req)
		require.Equal(t, c.code, *rows[0].SQLState, c.req)
		require.NotEmpty(t, *rows[0].Reason)
	}
	// 255 characters are fine.
	require.Equal(t, "ok", applyRequests(t, q, request(incUpdate, 1, string(long[:255])))[0].Status)
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT count(*) FROM silo.idempotency_keys`).Scan(&n))
	require.Equal(t, 1, n, "refused requests claim no key")
}

// A call without keys skips the claims; its requests are checked all the same, and a malformed one
// costs the others of the call nothing, in both modes.
func TestRequestsWithoutKeysAreChecked(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	good := `{"updates": ` + incUpdate + `, "token_id": 3}`
	for _, bad := range []string{`{"updates": "x"}`, `{"other": []}`, `[1]`, `7`,
		`{"updates": [], "token_id": "7"}`, `{"updates": [], "token_id": -1}`, `{"updates": [], "token_id": 1.5}`} {
		rows := applyRequests(t, q, good, bad, good)
		require.Len(t, rows, 3, bad)
		require.Equal(t, []string{"ok", "refused", "ok"}, []string{rows[0].Status, rows[1].Status, rows[2].Status}, bad)
		require.Equal(t, []int32{1, 2, 3}, []int32{rows[0].Request, rows[1].Request, rows[2].Request}, bad)
		require.Equal(t, "SLINV", *rows[1].SQLState, bad)

		enq, err := q.ProfileEnqueueRequests(context.Background(), db.ProfileEnqueueRequestsParams{
			Requests: []byte("[" + good + "," + bad + "," + good + "]"), Priority: "high"})
		require.NoError(t, err)
		require.Len(t, enq, 3, bad)
		require.EqualValues(t, 1, *enq[0].Accepted, bad)
		require.Equal(t, "SLINV", *enq[1].SQLState, bad)
		require.EqualValues(t, 1, *enq[2].Accepted, bad)
		require.Less(t, *enq[0].FirstID, *enq[2].FirstID, bad)
	}
	// Without keys and well-formed: each request gets its own rows, an empty one none (apply) or
	// an accepted count of 0 (enqueue).
	rows := applyRequests(t, q, `{"updates": [`+incUpdate+`, `+incUpdate+`]}`, `{"updates": []}`, good)
	require.Len(t, rows, 3)
	require.Equal(t, []int32{1, 1, 3}, []int32{rows[0].Request, rows[1].Request, rows[2].Request})
	require.Equal(t, []int32{1, 2, 1}, []int32{*rows[0].Ord, *rows[1].Ord, *rows[2].Ord})
	enq, err := q.ProfileEnqueueRequests(context.Background(), db.ProfileEnqueueRequestsParams{
		Requests: []byte(`[{"updates": [` + incUpdate + `, ` + incUpdate + `]}, {"updates": []}, ` + good + `]`), Priority: "high"})
	require.NoError(t, err)
	require.Len(t, enq, 3)
	require.EqualValues(t, []int32{2, 0, 1}, []int32{*enq[0].Accepted, *enq[1].Accepted, *enq[2].Accepted})
	require.Equal(t, *enq[0].FirstID+1, *enq[0].LastID)
	require.Nil(t, enq[1].FirstID)
}

// Two requests with one key in one call: the second gets the first's answer.
func TestIdempotencyKeyTwiceInOneCall(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	rows := applyRequests(t, q,
		request("["+incUpdate+","+incUpdate+"]", 1, "twice"),
		request(`{"_id": "k2", "_path": ["n"], "_value": {"_v": "x"}}`, 1, ""),
		request("["+incUpdate+","+incUpdate+"]", 1, "twice"))
	require.Len(t, rows, 5)
	require.Equal(t, []int32{1, 1, 2, 3, 3}, []int32{rows[0].Request, rows[1].Request, rows[2].Request, rows[3].Request, rows[4].Request})
	require.Equal(t, int32(2), *rows[4].Ord)
	require.False(t, rows[0].Replayed)
	require.True(t, rows[3].Replayed)
	require.True(t, rows[4].Replayed)
	require.Equal(t, "2", counter(t, tx, "k1"))
}

// After the window a key counts as new; api.idempotency_trim deletes the old ones.
func TestIdempotencyWindow(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	applyRequests(t, q, request(incUpdate, 1, "old"))
	_, err := tx.Exec(ctx, `UPDATE silo.idempotency_keys SET created = now() - interval '25 hours'`)
	require.NoError(t, err)
	require.False(t, applyRequests(t, q, request(incUpdate, 1, "old"))[0].Replayed, "past the 24 hour default")
	require.Equal(t, "2", counter(t, tx, "k1"))

	_, err = tx.Exec(ctx, `UPDATE silo.settings SET value = '1 hour' WHERE key = 'idempotency.window'`)
	require.NoError(t, err)
	applyRequests(t, q, request(incUpdate, 1, "recent"))
	_, err = tx.Exec(ctx, `UPDATE silo.idempotency_keys SET created = now() - interval '2 hours' WHERE key = 'old'`)
	require.NoError(t, err)
	var n int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT api.idempotency_trim()`).Scan(&n))
	require.Equal(t, int64(1), n)
	var keys []string
	rows, err := tx.Query(ctx, `SELECT key FROM silo.idempotency_keys`)
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"recent"}, keys)
}

// The async route: each joined request gets its own ids, in request order, and a repeat its first
// answer.
func TestIdempotencyKeyOnEnqueue(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	body := "[" + request("["+incUpdate+","+incUpdate+"]", 1, "e1") + "," + request(incUpdate, 1, "") + "," +
		request("[]", 1, "e-empty") + "]"
	rows, err := q.ProfileEnqueueRequests(ctx, db.ProfileEnqueueRequestsParams{Requests: []byte(body), Priority: "low"})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	require.Equal(t, int32(2), *rows[0].Accepted)
	require.Equal(t, int32(1), *rows[1].Accepted)
	require.Equal(t, int32(0), *rows[2].Accepted)
	require.Nil(t, rows[2].FirstID)
	require.Less(t, *rows[0].FirstID, *rows[0].LastID)
	require.Less(t, *rows[0].LastID, *rows[1].FirstID)
	again, err := q.ProfileEnqueueRequests(ctx, db.ProfileEnqueueRequestsParams{
		Requests: []byte("[" + request("["+incUpdate+","+incUpdate+"]", 1, "e1") + "]"), Priority: "low"})
	require.NoError(t, err)
	require.True(t, again[0].Replayed)
	require.Equal(t, *rows[0].FirstID, *again[0].FirstID)
	require.Equal(t, *rows[0].LastID, *again[0].LastID)
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.inbox`).Scan(&n))
	require.Equal(t, 3, n, "enqueued once")
}

// A key is recorded with its write or not at all, and a repeat in flight waits for the first.
func TestIdempotencyKeyCommitsWithTheWrite(t *testing.T) {
	pool := dbtest.Pool(t)
	ctx := context.Background()
	q := db.New(pool)

	// Rolled back: the retry applies.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	applyRequests(t, db.New(tx), request(incUpdate, 1, "rb"))
	require.NoError(t, tx.Rollback(ctx))
	require.False(t, applyRequests(t, q, request(incUpdate, 1, "rb"))[0].Replayed)
	require.Equal(t, "1", counter(t, pool, "k1"))

	// In flight: the repeat waits, then replays.
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) }) // when the test fails before the commit
	applyRequests(t, db.New(tx), request(incUpdate, 1, "fly"))
	type answer struct {
		rows []db.ProfileApplyRequestsRow
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		rows, err := q.ProfileApplyRequests(ctx, db.ProfileApplyRequestsParams{Requests: []byte("[" + request(incUpdate, 1, "fly") + "]")})
		done <- answer{rows, err}
	}()
	select {
	case a := <-done:
		t.Fatalf("the repeat did not wait for the first request's transaction: %v %v", a.rows, a.err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	a := <-done
	require.NoError(t, a.err)
	rows := a.rows
	require.Len(t, rows, 1)
	require.True(t, rows[0].Replayed)
	require.Equal(t, "2", counter(t, pool, "k1"))
}

// FuzzProfileApplyRequests feeds arbitrary request arrays to api.profile_apply_requests. Whatever
// it gets, it raises only SLINV (for input that is no JSON array) and otherwise answers every
// request: a refused row with SLINV, SLIDK or SLIDM, or its results, in request order.
//
//	go test ./db/ -run '^$' -fuzz FuzzProfileApplyRequests -fuzztime 60s
func FuzzProfileApplyRequests(f *testing.F) {
	for _, s := range []string{
		`[{"updates": {"_id":"f","_path":["p"],"_value":{"_v":"x"}}, "token_id": 1, "idempotency_key": "a"}]`,
		`[{"updates": [], "idempotency_key": "a"}, {"updates": [], "idempotency_key": "a"}, {"updates": [1]}]`,
		`[{"updates": {"_id":"f"}, "idempotency_key": ""}, {"updates": 7}, 3, null, {"token_id": -1, "updates": {}}]`,
		`[{"updates": [{"_id":"f","_path":["c"],"_operation":"_inc","_value":{"_v":"0|1|1"}}], "idempotency_key": "k", "token_id": 99999999999999999999}]`,
		`{"updates": []}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		tx := dbtest.Tx(t)
		if !json.Valid(data) || dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, string(data))
			return err
		}) != nil {
			return // not the function's input
		}
		var reqs []json.RawMessage
		isArray := bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) && json.Unmarshal(data, &reqs) == nil
		var rows []db.ProfileApplyRequestsRow
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			var err error
			rows, err = db.New(tx).ProfileApplyRequests(ctx, db.ProfileApplyRequestsParams{Requests: data})
			return err
		})
		if !isArray {
			requireSQLState(t, err, "SLINV")
			return
		}
		require.NoError(t, err)
		seen := map[int32]bool{}
		last := int32(0)
		for _, r := range rows {
			require.GreaterOrEqual(t, r.Request, last, "request order")
			require.LessOrEqual(t, r.Request, int32(len(reqs)))
			last = r.Request
			seen[r.Request] = true
			if r.Status == "refused" {
				require.Contains(t, []string{"SLINV", "SLIDK", "SLIDM"}, *r.SQLState)
				require.NotEmpty(t, *r.Reason)
				continue
			}
			require.Contains(t, []string{"ok", "noop", "dead_letter"}, r.Status)
		}
		// A request without a row applied nothing: an empty array of updates.
		for i, raw := range reqs {
			if seen[int32(i+1)] {
				continue
			}
			var req struct {
				Updates json.RawMessage `json:"updates"`
			}
			require.NoError(t, json.Unmarshal(raw, &req), "request %d has no row", i+1)
			require.Equal(t, "[]", strings.ReplaceAll(string(bytes.TrimSpace(req.Updates)), " ", ""), "request %d has no row", i+1)
		}
	})
}
