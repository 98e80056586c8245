package db_test

// Event store ingest (sql/event/02_ingest.sql): every header rule, deduplication by event id (in
// one call, across calls, between concurrent calls), the fan-out to consumers in the lanes of
// linked correlation ids, and the requests shape with idempotency keys.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// ev is an event with headers id, type and correlation id, plus extra header fields (a JSON
// fragment) and payload.
func evMsg(id, typ, cid, extra, payload string) string {
	h := fmt.Sprintf(`"grnry-event-id": %q, "grnry-event-type": %q, "grnry-correlation-id": %q`, id, typ, cid)
	if extra != "" {
		h += ", " + extra
	}
	return fmt.Sprintf(`{"event_headers": {%s}, "event_payload": %s}`, h, payload)
}

func evIngest(t *testing.T, q db.DBTX, events string) []db.EventIngestRow {
	t.Helper()
	rows, err := db.New(q).EventIngest(context.Background(), json.RawMessage(events))
	require.NoError(t, err)
	return rows
}

func evStr(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// statuses is one "status[/sqlstate]" per row.
func evStatuses(rows []db.EventIngestRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Status
		if r.SQLState != nil {
			out[i] += "/" + *r.SQLState
		}
	}
	return out
}

func TestEventIngestStoresAndAnswersPerEvent(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	rows := evIngest(t, tx, "["+strings.Join([]string{
		evMsg("e1", "click", "c1", `"grnry-event-timestamp": 1584708855528, "grnry-harvester-name": "web", "x-custom": {"a": 1}`, `{"n": 1}`),
		evMsg("e2", "click", "c1", `"grnry-event-timestamp": "1584708855529"`, `[1, 2]`),
		evMsg("e3", "view", "c2", `"grnry-event-timestamp": "2020-03-20T12:54:15.530+01:00", "grnry-event-type-version": "2"`, `"text"`),
		evMsg("e4", "view", "c2", "", `null`),
	}, ",")+"]")
	require.Equal(t, []string{"stored", "stored", "stored", "stored"}, evStatuses(rows))
	for i, r := range rows {
		require.Equal(t, int32(i+1), r.Ord)
		require.Equal(t, fmt.Sprintf("e%d", i+1), evStr(r.EventID))
		require.NotNil(t, r.FirstStored)
	}

	var at time.Time
	var harvester, version *string
	var headers, payload string
	require.NoError(t, tx.QueryRow(ctx, `SELECT at, harvester_name, type_version, headers::text, payload::text FROM event.events WHERE event_id = 'e1'`).
		Scan(&at, &harvester, &version, &headers, &payload))
	require.Equal(t, time.UnixMilli(1584708855528).UTC(), at.UTC())
	require.Equal(t, "web", evStr(harvester))
	require.Nil(t, version)
	require.Contains(t, headers, `"x-custom": {"a": 1}`)
	require.Equal(t, `{"n": 1}`, payload)

	require.NoError(t, tx.QueryRow(ctx, `SELECT at FROM event.events WHERE event_id = 'e2'`).Scan(&at))
	require.Equal(t, time.UnixMilli(1584708855529).UTC(), at.UTC())
	require.NoError(t, tx.QueryRow(ctx, `SELECT at, type_version FROM event.events WHERE event_id = 'e3'`).Scan(&at, &version))
	require.Equal(t, time.Date(2020, 3, 20, 11, 54, 15, 530e6, time.UTC), at.UTC())
	require.Equal(t, "2", evStr(version))
	// No timestamp: the time of ingest.
	var isNow bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT at = now() AND payload = 'null' FROM event.events WHERE event_id = 'e4'`).Scan(&isNow))
	require.True(t, isNow)

	// One event alone, not in an array.
	rows = evIngest(t, tx, evMsg("e5", "click", "c1", "", `{}`))
	require.Equal(t, []string{"stored"}, evStatuses(rows))
}

// Every rule, each broken alone; the good events around them are stored.
func TestEventIngestRefusals(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	long := strings.Repeat("x", 256)
	cases := []struct {
		event, sqlstate, reason string
	}{
		{`42`, "SEEVT", "must be a JSON object"},
		{`[]`, "SEEVT", "must be a JSON object"},
		{`{"event_payload": {}}`, "SEEVT", "event_headers must be a JSON object, got nothing"},
		{`{"event_headers": [], "event_payload": {}}`, "SEEVT", "event_headers must be a JSON object, got array"},
		{`{"event_headers": {"grnry-event-id": "a", "grnry-event-type": "t", "grnry-correlation-id": "c"}}`, "SEEVT", "event_payload is required"},
		{`{"event_headers": {"grnry-event-type": "t", "grnry-correlation-id": "c"}, "event_payload": 1}`, "SEHDR", "grnry-event-id is required"},
		{`{"event_headers": {"grnry-event-id": null, "grnry-event-type": "t", "grnry-correlation-id": "c"}, "event_payload": 1}`, "SEHDR", "grnry-event-id is required"},
		{evMsg("", "t", "c", "", "1"), "SEHDR", "grnry-event-id must not be empty"},
		{evMsg(long, "t", "c", "", "1"), "SEHDR", "grnry-event-id must be at most 255 characters, got 256"},
		{`{"event_headers": {"grnry-event-id": 7, "grnry-event-type": "t", "grnry-correlation-id": "c"}, "event_payload": 1}`, "SEHDR", "grnry-event-id must be a string, got number"},
		{`{"event_headers": {"grnry-event-id": "a", "grnry-correlation-id": "c"}, "event_payload": 1}`, "SEHDR", "grnry-event-type is required"},
		{evMsg("a", "", "c", "", "1"), "SEHDR", "grnry-event-type must not be empty"},
		{evMsg("a", long, "c", "", "1"), "SEHDR", "grnry-event-type must be at most 255 characters"},
		{`{"event_headers": {"grnry-event-id": "a", "grnry-event-type": "t"}, "event_payload": 1}`, "SEHDR", "grnry-correlation-id is required"},
		{`{"event_headers": {"grnry-event-id": "a", "grnry-event-type": "t", "grnry-correlation-id": {}}, "event_payload": 1}`, "SEHDR", "grnry-correlation-id must be a string, got object"},
		{evMsg("a", "t", strings.Repeat("é", 257), "", "1"), "SEHDR", "grnry-correlation-id must be at most 512 bytes, got 514"},
		{evMsg("a", "t", "c", `"grnry-harvester-name": 1`, "1"), "SEHDR", "grnry-harvester-name must be a string"},
		{evMsg("a", "t", "c", `"grnry-event-type-version": 2`, "1"), "SEHDR", "grnry-event-type-version must be a string"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": "yesterday"`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": -1`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": 1.5`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": 253402300800000`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": "2021-02-30T00:00:00Z"`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": true`, "1"), "SETIM", "grnry-event-timestamp must be"},
		// JSON values whose text could pass for a string's.
		{`{"event_headers": {"grnry-event-id": true, "grnry-event-type": "t", "grnry-correlation-id": "c"}, "event_payload": 1}`, "SEHDR", "grnry-event-id must be a string, got boolean"},
		{`{"event_headers": {"grnry-event-id": "a", "grnry-event-type": -7, "grnry-correlation-id": "c"}, "event_payload": 1}`, "SEHDR", "grnry-event-type must be a string, got number"},
		{`{"event_headers": {"grnry-event-id": "a", "grnry-event-type": "t", "grnry-correlation-id": ["c"]}, "event_payload": 1}`, "SEHDR", "grnry-correlation-id must be a string, got array"},
		{evMsg("a", "t", "c", `"grnry-harvester-name": false`, "1"), "SEHDR", "grnry-harvester-name must be a string, got boolean"},
		{evMsg("a", "t", "c", `"grnry-event-type-version": {"v": 1}`, "1"), "SEHDR", "grnry-event-type-version must be a string, got object"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": "12a"`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": " 12"`, "1"), "SETIM", "grnry-event-timestamp must be"},
		{evMsg("a", "t", "c", `"grnry-event-timestamp": ""`, "1"), "SETIM", "grnry-event-timestamp must be"},
	}
	for i, c := range cases {
		good := evMsg(fmt.Sprintf("good-%d", i), "t", "c", "", "1")
		rows := evIngest(t, tx, "["+good+","+c.event+","+good+"]")
		require.Len(t, rows, 3, c.event)
		require.Equal(t, "stored", rows[0].Status, c.event)
		require.Equal(t, "refused", rows[1].Status, c.event)
		require.Equal(t, c.sqlstate, evStr(rows[1].SQLState), c.event)
		require.Contains(t, evStr(rows[1].Reason), c.reason, c.event)
		require.Nil(t, rows[1].FirstStored)
		require.Equal(t, "duplicate", rows[2].Status, c.event)
	}
	var n int
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT count(*) FROM event.events WHERE event_id = 'a'`).Scan(&n))
	require.Zero(t, n)

	// Neither an object nor an array: an error.
	_, err := db.New(tx).EventIngest(context.Background(), json.RawMessage(`"x"`))
	require.Equal(t, "SLINV", sqlState(err))
}

// Strings whose text a number, a boolean, an object or an array could have are strings all the
// same: stored as sent. Timestamps of digits are epoch milliseconds as numbers or strings.
func TestEventIngestStringsLikeOtherJSON(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	rows := evIngest(t, tx, "["+strings.Join([]string{
		evMsg("123", "false", "0", `"grnry-harvester-name": "1", "grnry-event-type-version": "-"`, `1`),
		evMsg("true", "[t]", "{c}", `"grnry-harvester-name": "true", "grnry-event-timestamp": 1000`, `1`),
		evMsg("-1", "t", "c", `"grnry-event-type-version": "{}", "grnry-event-timestamp": "000000000001000"`, `1`),
		evMsg("{x}", "t", "c", `"grnry-harvester-name": "", "grnry-event-timestamp": "0"`, `1`),
	}, ",")+"]")
	require.Equal(t, []string{"stored", "stored", "stored", "stored"}, evStatuses(rows))
	var got []string
	r, err := tx.Query(ctx, `SELECT format('%s|%s|%s|%s|%s|%s', event_id, event_type, correlation_id, coalesce(harvester_name, '-null-'),
		coalesce(type_version, '-null-'), (extract(epoch FROM at) * 1000)::bigint) FROM event.events ORDER BY received, event_id`)
	require.NoError(t, err)
	got, err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		"-1|t|c|-null-|{}|1000",
		"123|false|0|1|-|" + fmt.Sprint(evNowMillis(t, tx)),
		"true|[t]|{c}|true|-null-|1000",
		"{x}|t|c||-null-|0",
	}, got)
}

// evNowMillis is the transaction's time in epoch milliseconds.
func evNowMillis(t *testing.T, tx pgx.Tx) int64 {
	t.Helper()
	var ms int64
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT (extract(epoch FROM now()) * 1000)::bigint`).Scan(&ms))
	return ms
}

func TestEventIngestDeduplicates(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	_, err := tx.Exec(ctx, `INSERT INTO event.event_ids (event_id, at, correlation_id, received) VALUES ('old', now(), 'c', '2020-01-01Z')`)
	require.NoError(t, err)
	rows := evIngest(t, tx, "["+strings.Join([]string{
		evMsg("d1", "t", "c", "", `1`),
		evMsg("d1", "t", "c", "", `2`),
		evMsg("old", "t", "c", "", `3`),
		`{"event_headers": {"grnry-event-id": "d2"}, "event_payload": 4}`,
		evMsg("d2", "t", "c", "", `5`),
	}, ",")+"]")
	require.Equal(t, []string{"stored", "duplicate", "duplicate", "refused/SEHDR", "stored"}, evStatuses(rows))
	require.Equal(t, "d2", evStr(rows[3].EventID))
	require.Equal(t, *rows[0].FirstStored, *rows[1].FirstStored)
	require.Equal(t, time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), rows[2].FirstStored.UTC())
	var payload string
	require.NoError(t, tx.QueryRow(ctx, `SELECT string_agg(payload::text, ',') FROM event.events WHERE event_id IN ('d1', 'old')`).Scan(&payload))
	require.Equal(t, "1", payload)

	// Sent again in a later call: duplicate, with the time it was first stored.
	rows = evIngest(t, tx, evMsg("d1", "t", "c", "", `9`))
	require.Equal(t, []string{"duplicate"}, evStatuses(rows))
}

// Concurrent ingests of the same ids: each id is stored once, the others answer duplicate.
func TestEventIngestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	const calls, ids = 4, 50
	var events []string
	for i := range ids {
		events = append(events, evMsg(fmt.Sprintf("id-%d", i), "t", fmt.Sprintf("c%d", i%7), "", "1"))
	}
	var wg sync.WaitGroup
	stored := make([]int, calls)
	for c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each call in another order.
			order := make([]string, ids)
			for i := range ids {
				order[i] = events[(i*(c+1)+c)%ids]
			}
			rows, err := db.New(pool).EventIngest(ctx, json.RawMessage("["+strings.Join(order, ",")+"]"))
			if !evNoErr(t, err) {
				return
			}
			for _, r := range rows {
				if r.Status == "stored" {
					stored[c]++
				}
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range stored {
		total += n
	}
	require.Equal(t, ids, total)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM event.events`).Scan(&n))
	require.Equal(t, ids, n)
}

func evNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

type evDelivery struct {
	Consumer string
	Lane     int
	CID      string
	EventCID string
	EventID  string
}

func evDeliveries(t *testing.T, q db.DBTX) []evDelivery {
	t.Helper()
	rows, err := q.Query(context.Background(), `
		SELECT c.name, d.lane, d.correlation_id, d.event_cid, d.event_id
		FROM event.deliveries d JOIN event.consumers c ON c.id = d.consumer_id ORDER BY d.id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []evDelivery
	for rows.Next() {
		var d evDelivery
		require.NoError(t, rows.Scan(&d.Consumer, &d.Lane, &d.CID, &d.EventCID, &d.EventID))
		out = append(out, d)
	}
	require.NoError(t, rows.Err())
	return out
}

func evLane(t *testing.T, q db.DBTX, cid string, lanes int) int {
	t.Helper()
	var l int
	require.NoError(t, q.QueryRow(context.Background(), `SELECT event_private.lane_of($1, $2::smallint)`, cid, lanes).Scan(&l))
	return l
}

func TestEventIngestDeliversToConsumers(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()

	// No consumer: events are stored, nothing is delivered.
	evIngest(t, tx, evMsg("n1", "click", "c1", "", "1"))
	require.Empty(t, evDeliveries(t, tx))

	_, err := tx.Exec(ctx, `
		SELECT event_private.consumer_create('a', '{click}', 8::smallint);
		SELECT event_private.consumer_create('b', '{click,view}', 16::smallint);`)
	require.NoError(t, err)
	// old is linked to mid, mid to new: events of old go to new's lane.
	rows, err := db.New(tx).ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(`[
		{"_id": "old", "_operation": "_profile_link", "_value": {"_v": "mid"}},
		{"_id": "mid", "_operation": "_profile_link", "_value": {"_v": "new"}}]`)})
	require.NoError(t, err)
	for _, r := range rows {
		require.Equal(t, "ok", r.Status, evStr(r.Reason))
	}

	got := evIngest(t, tx, "["+strings.Join([]string{
		evMsg("d1", "click", "c1", "", "1"),
		evMsg("d2", "view", "c2", "", "1"),
		evMsg("d3", "other", "c3", "", "1"),
		evMsg("d1", "click", "c1", "", "1"),
		evMsg("d4", "click", "old", "", "1"),
		evMsg("n1", "click", "c1", "", "1"),
	}, ",")+"]")
	require.Equal(t, []string{"stored", "stored", "stored", "duplicate", "stored", "duplicate"}, evStatuses(got))
	require.Equal(t, []evDelivery{
		{"a", evLane(t, tx, "c1", 8), "c1", "c1", "d1"},
		{"b", evLane(t, tx, "c1", 16), "c1", "c1", "d1"},
		{"b", evLane(t, tx, "c2", 16), "c2", "c2", "d2"},
		{"a", evLane(t, tx, "new", 8), "new", "old", "d4"},
		{"b", evLane(t, tx, "new", 16), "new", "old", "d4"},
	}, evDeliveries(t, tx))
}

func TestEventIngestRequests(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	call := func(body string) []db.EventIngestRequestsRow {
		t.Helper()
		rows, err := q.EventIngestRequests(ctx, db.EventIngestRequestsParams{Requests: json.RawMessage(body)})
		require.NoError(t, err)
		return rows
	}
	type res struct {
		Request  int32
		Ord      int32
		Status   string
		SQLState string
		Replayed bool
	}
	flat := func(rows []db.EventIngestRequestsRow) []res {
		out := make([]res, len(rows))
		for i, r := range rows {
			out[i] = res{r.Request, 0, r.Status, evStr(r.SQLState), r.Replayed}
			if r.Ord != nil {
				out[i].Ord = *r.Ord
			}
		}
		return out
	}
	rows := call(`[
		{"events": [` + evMsg("r1", "t", "c", "", "1") + `, null, ` + evMsg("r2", "t", "c", "", "2") + `], "token_id": 1, "invalid": {"2": "line 2 is not JSON"}},
		{"events": ` + evMsg("r1", "t", "c", "", "1") + `, "token_id": 1, "idempotency_key": "k1"},
		{"events": 5, "token_id": 1},
		{"events": [` + evMsg("r3", "t", "c", "", "1") + `], "token_id": 1, "idempotency_key": "k2"}]`)
	require.Equal(t, []res{
		{1, 1, "stored", "<nil>", false},
		{1, 2, "refused", "SEEVT", false},
		{1, 3, "stored", "<nil>", false},
		{2, 1, "duplicate", "<nil>", false},
		{3, 0, "refused", "SLINV", false},
		{4, 1, "stored", "<nil>", false},
	}, flat(rows))
	require.Equal(t, "line 2 is not JSON", evStr(rows[1].Reason))

	// A repeat of a key gets its first answer, and stores nothing.
	rows = call(`[{"events": [` + evMsg("r3", "t", "c", "", "1") + `], "token_id": 1, "idempotency_key": "k2"},
		{"events": [` + evMsg("r4", "t", "c", "", "1") + `], "token_id": 1, "idempotency_key": "k1"}]`)
	require.Equal(t, []res{
		{1, 1, "stored", "<nil>", true},
		{2, 0, "refused", "SLIDM", false},
	}, flat(rows))
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM event.events WHERE event_id = 'r4'`).Scan(&n))
	require.Zero(t, n)

	// NDJSON as text beside the requests ("text": true): read line by line, blank lines skipped,
	// the lines named invalid not read; a key's repeat is told by the text.
	texts := func(body string, ts ...string) []db.EventIngestRequestsRow {
		t.Helper()
		rows, err := q.EventIngestRequests(ctx, db.EventIngestRequestsParams{Requests: json.RawMessage(body), Texts: ts})
		require.NoError(t, err)
		return rows
	}
	nd := evMsg("t1", "t", "c", "", "1") + "\n\n \t\r\n{not json\n " + evMsg("t2", "t", "c", "", "2")
	rows = texts(`[{"text": true, "token_id": 1, "idempotency_key": "k3", "invalid": {"2": "line 2 is not JSON"}},
		{"events": `+evMsg("t3", "t", "c", "", "3")+`, "token_id": 1}]`, nd, "")
	require.Equal(t, []res{
		{1, 1, "stored", "<nil>", false},
		{1, 2, "refused", "SEEVT", false},
		{1, 3, "stored", "<nil>", false},
		{2, 1, "stored", "<nil>", false},
	}, flat(rows))
	rows = texts(`[{"text": true, "token_id": 1, "idempotency_key": "k3", "invalid": {"2": "line 2 is not JSON"}}]`, nd)
	require.Equal(t, []res{
		{1, 1, "stored", "<nil>", true},
		{1, 2, "refused", "SEEVT", true},
		{1, 3, "stored", "<nil>", true},
	}, flat(rows))
	rows = texts(`[{"text": true, "token_id": 1, "idempotency_key": "k3"}]`, evMsg("t4", "t", "c", "", "4"))
	require.Equal(t, []res{{1, 0, "refused", "SLIDM", false}}, flat(rows))
	// Lines of blanks only are skipped, lines that start with one are read.
	rows = texts(`[{"text": true}]`, " \t\n\t"+evMsg("t5", "t", "c", "", "5")+"\r\n\r\n \n"+evMsg("t6", "t", "c", "", "6"))
	require.Equal(t, []res{{1, 1, "stored", "<nil>", false}, {1, 2, "stored", "<nil>", false}}, flat(rows))
}

// With answers, a request none of whose events was refused comes as one row, the text of its
// answer as POST /events sends it; a request with a refusal keeps its rows.
func TestEventIngestAnswers(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	var now string
	require.NoError(t, tx.QueryRow(ctx, `SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`).Scan(&now))
	call := func(body string, texts ...string) []db.EventIngestRequestsRow {
		t.Helper()
		rows, err := q.EventIngestRequests(ctx, db.EventIngestRequestsParams{Requests: json.RawMessage(body), Texts: texts, Answers: true})
		require.NoError(t, err)
		return rows
	}
	answer := func(status, id string) string {
		b, _ := json.Marshal(id)
		return `{"eventId":` + string(b) + `,"status":"` + status + `","firstStored":"` + now + `"}`
	}
	answered := func(rows []db.EventIngestRequestsRow, request int32, replayed bool, elements ...string) {
		t.Helper()
		require.Len(t, rows, 1)
		require.Equal(t, request, rows[0].Request)
		require.Nil(t, rows[0].Ord)
		require.Equal(t, "answered", rows[0].Status)
		require.Equal(t, replayed, rows[0].Replayed)
		require.NotNil(t, rows[0].Answer)
		require.Equal(t, "["+strings.Join(elements, ",")+"]", *rows[0].Answer)
		require.True(t, json.Valid([]byte(*rows[0].Answer)))
	}

	// One request alone, every event stored (the usual call); ids JSON-escaped.
	answered(call(`[{"text": true}]`, evMsg("ans-a1", "t", "c", "", "1")+"\n"+evMsg(`ans-a"2\`, "t", "c", "", "2")+"\n"+evMsg("ans-a\t5é", "t", "c", "", "5")),
		1, false, answer("stored", "ans-a1"), answer("stored", `ans-a"2\`), answer("stored", "ans-a\t5é"))
	// Duplicates (the careful way): firstStored is when the id was first stored.
	answered(call(`[{"events": [`+evMsg("ans-a1", "t", "c", "", "1")+`, `+evMsg("ans-a3", "t", "c", "", "3")+`, `+evMsg("ans-a3", "t", "c", "", "3")+`]}]`),
		1, false, answer("duplicate", "ans-a1"), answer("stored", "ans-a3"), answer("duplicate", "ans-a3"))
	// A refusal: a row per event.
	rows := call(`[{"events": [` + evMsg("ans-a4", "t", "c", "", "4") + `, 5]}]`)
	require.Len(t, rows, 2)
	require.Equal(t, []string{"stored", "refused"}, []string{rows[0].Status, rows[1].Status})
	require.Nil(t, rows[0].Answer)
	// Nothing to store: no row.
	require.Empty(t, call(`[{"events": []}]`))

	// Joined requests: each answered on its own; a request refused whole or with a refused event
	// keeps its rows; a repeated key gets its first answer, marked replayed.
	rows = call(`[{"events": [` + evMsg("ans-b1", "t", "c", "", "1") + `], "token_id": 77, "idempotency_key": "answers-k1"},
		{"events": [6], "token_id": 77},
		{"events": 5, "token_id": 77},
		{"events": ` + evMsg("ans-b1", "t", "c", "", "1") + `, "token_id": 77}]`)
	require.Len(t, rows, 4)
	answered(rows[:1], 1, false, answer("stored", "ans-b1"))
	require.Equal(t, []string{"refused", "refused"}, []string{rows[1].Status, rows[2].Status})
	require.Equal(t, int32(1), *rows[1].Ord)
	require.Nil(t, rows[2].Ord)
	answered(rows[3:], 4, false, answer("duplicate", "ans-b1"))
	answered(call(`[{"events": [`+evMsg("ans-b1", "t", "c", "", "1")+`], "token_id": 77, "idempotency_key": "answers-k1"}]`),
		1, true, answer("stored", "ans-b1"))
}
