package db_test

// Tests of belt processing (sql/belt/04_process.sql, 05_step.sql, 06_dead_letter.sql): steps that
// run a belt's callback over its deliveries and apply the updates in the same transaction; order per
// correlation id, retries with back-off and give-up, dead letters and replay, transient errors,
// profile fetching, linking redirection, dropped callbacks, long-running counts. Each test runs in
// its own transaction (beltEnv), except those that need several connections.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// evType is the event type the test's belts consume: unique to the test, so that concurrent tests
// never deliver to each other's belts.
func (e *beltEnv) evType() string { return e.name("pv") }

// ingest stores events of the test's type: each given as "id cid payload-json".
func (e *beltEnv) ingest(events ...string) {
	e.t.Helper()
	ingestEvents(e.t, e.tx, e.evType(), events...)
}

func ingestEvents(t *testing.T, q db.DBTX, typ string, events ...string) {
	t.Helper()
	var arr []map[string]any
	for _, ev := range events {
		parts := strings.SplitN(ev, " ", 3)
		var payload any
		require.NoError(t, json.Unmarshal([]byte(parts[2]), &payload), ev)
		arr = append(arr, map[string]any{
			"event_headers": map[string]any{"grnry-event-id": parts[0], "grnry-event-type": typ, "grnry-correlation-id": parts[1]},
			"event_payload": payload})
	}
	raw, err := json.Marshal(arr)
	require.NoError(t, err)
	rows, err := db.New(q).EventIngest(context.Background(), raw)
	require.NoError(t, err)
	for _, r := range rows {
		require.NotEqual(t, "refused", r.Status, "%+v", r)
	}
}

// belt creates a SQL belt of the test's event type with callback fn and extraEnv settings.
func (e *beltEnv) belt(fn string, fetch string, env map[string]string) int64 {
	e.t.Helper()
	var extra []map[string]string
	for k, v := range env {
		extra = append(extra, map[string]string{"name": k, "value": v})
	}
	fields := map[string]any{"name": "$NAME", "eventTypes": []string{e.evType()}, "sqlCallback": fn}
	if fetch != "" {
		fields["fetchProfile"] = fetch
	}
	if extra != nil {
		fields["extraEnv"] = extra
	}
	d := e.create(fields)
	require.Equal(e.t, "RUNNING", d.Status, "%v", d.StatusReason)
	return e.id(d)
}

func (e *beltEnv) step(belt int64) db.BeltProcessRow {
	e.t.Helper()
	r, err := e.q.BeltProcess(e.ctx, db.BeltProcessParams{BeltID: &belt})
	require.NoError(e.t, err)
	return r
}

// grain is the _latest value of a grain, "" when there is none.
func (e *beltEnv) grain(cid, path string) string {
	e.t.Helper()
	var v string
	err := e.tx.QueryRow(e.ctx, `SELECT coalesce((SELECT value::text || '@' || origin FROM profile.profilestore
		WHERE correlation_id = $1 AND profile_type = '_d' AND path = $2 AND pit = '_latest'), '')`, cid, path).Scan(&v)
	require.NoError(e.t, err)
	return v
}

func (e *beltEnv) deliveries(belt int64) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.tx.QueryRow(e.ctx, `SELECT count(*) FROM event.deliveries d JOIN belt.belts b ON b.consumer_id = d.consumer_id
		WHERE b.id = $1`, belt).Scan(&n))
	return n
}

type beltDeadLetter struct {
	EventID  string `json:"eventId"`
	Error    string `json:"error"`
	SQLState string `json:"sqlstate"`
	Retries  int    `json:"retries"`
	Replayed *int64 `json:"replayed"`
	Trace    string `json:"traceback"`
}

func (e *beltEnv) deadLetters(belt int64) []beltDeadLetter {
	e.t.Helper()
	raw, err := e.q.BeltDeadLetterList(e.ctx, db.BeltDeadLetterListParams{BeltID: belt, PageOffset: 0, PageSize: 100})
	require.NoError(e.t, err)
	var page struct {
		Items []beltDeadLetter `json:"items"`
	}
	require.NoError(e.t, json.Unmarshal(raw, &page))
	return page.Items
}

// lane is the retry state of the lane of cid in belt.
func (e *beltEnv) lane(belt int64, cid string) (attempts int, wait time.Duration, lastSQLState string) {
	e.t.Helper()
	var secs float64
	require.NoError(e.t, e.tx.QueryRow(e.ctx, `
		SELECT l.attempts, CASE WHEN isfinite(l.not_before) THEN greatest(extract(epoch FROM l.not_before - clock_timestamp()), 0) ELSE 0 END, coalesce(l.last_sqlstate, '')
		FROM belt.belts b JOIN event.consumers c ON c.id = b.consumer_id
		JOIN event.consumer_lanes l ON l.consumer_id = c.id AND l.lane = event_private.lane_of($2, c.lanes)
		WHERE b.id = $1`, belt, cid).Scan(&attempts, &secs, &lastSQLState))
	return attempts, time.Duration(secs * float64(time.Second)), lastSQLState
}

// readyAgain ends every back-off of belt, as time passing would.
func (e *beltEnv) readyAgain(belt int64) {
	e.t.Helper()
	_, err := e.tx.Exec(e.ctx, `UPDATE event.consumer_lanes l SET not_before = '-infinity' FROM belt.belts b
		WHERE b.id = $1 AND l.consumer_id = b.consumer_id`, belt)
	require.NoError(e.t, err)
}

// visitFn is a callback that sets /visits/last to the payload's page (with history) and counts the
// visit; payload {"retry": "msg"} asks for a retry, {"boom": true} divides by zero, {"junk": true}
// returns a non-update besides its updates.
func (e *beltEnv) visitFn() string {
	return e.fn("visit", "(h jsonb, p jsonb, profile jsonb DEFAULT NULL) RETURNS jsonb", `
		SELECT CASE WHEN p ? 'retry' THEN api.belt_retry(p ->> 'retry')
		            WHEN p ? 'boom' THEN to_jsonb(1 / 0)
		            ELSE jsonb_build_array(
		                api.set_value(api.update(h ->> 'grnry-correlation-id', '{visits,last}', '_set_with_history'), p ->> 'page'),
		                api.set_value(api.update(h ->> 'grnry-correlation-id', '{visits,count}', '_inc'), '0|1|1'),
		                CASE WHEN p ? 'junk' THEN to_jsonb('not an update'::text) END) END`)
}

func TestBeltProcessAppliesInOrderOnce(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", nil)
	e.ingest(`e1 c1 {"page": "/a"}`, `e2 c1 {"page": "/b", "junk": true}`, `e3 c2 {"page": "/x"}`, `e3 c2 {"page": "/again"}`, `e4 c1 {"page": "/c"}`)
	r := e.step(belt)
	require.Equal(t, int32(4), r.Taken, "e3 sent twice is stored and delivered once")
	require.Equal(t, int32(4), r.Processed)
	require.Equal(t, int32(8), r.Updates, "the non-update is skipped")
	require.Zero(t, r.Failed+r.DeadLettered+r.Retried+r.UpdatesDeadLettered)
	require.False(t, r.More)
	origin := fmt.Sprintf("@/belts/%d", belt)
	require.Equal(t, `"/c"`+origin, e.grain("c1", "/visits/last"))
	require.Equal(t, `"/x"`+origin, e.grain("c2", "/visits/last"))
	// History in delivery order: /a, then /b, then /c as _latest.
	var history []string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT array(SELECT value #>> '{}' FROM profile.profilestore
		WHERE correlation_id = 'c1' AND path = '/visits/last' AND pit <> '_latest' ORDER BY inserted, pit)`).Scan(&history))
	require.Equal(t, []string{"/a", "/b"}, history)
	var count string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT value ->> '_current' FROM profile.profilestore
		WHERE correlation_id = 'c1' AND path = '/visits/count' AND pit = '_latest'`).Scan(&count))
	require.Equal(t, "3", count)
	require.Zero(t, e.deliveries(belt))
	// A second step finds nothing: processed once.
	r = e.step(belt)
	require.Zero(t, r.Taken)
	d := e.parse(must(e.q.BeltGet(e.ctx, belt)))
	require.Equal(t, int64(4), d.Processed)
}

func TestBeltProcessErrorIsDeadLetteredAndReplayed(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	fn := e.visitFn()
	belt := e.belt(fn, "", nil)
	e.ingest(`e1 c1 {"boom": true}`, `e2 c1 {"page": "/after"}`)
	r := e.step(belt)
	require.Equal(t, int32(2), r.Taken)
	require.Equal(t, int32(1), r.Processed, "the lane goes on after an error")
	require.Equal(t, int32(1), r.Failed)
	require.Equal(t, int32(1), r.DeadLettered)
	require.Zero(t, r.Retried)
	require.Contains(t, e.grain("c1", "/visits/last"), `"/after"`)
	dls := e.deadLetters(belt)
	require.Len(t, dls, 1)
	require.Equal(t, "e1", dls[0].EventID)
	require.Equal(t, "division by zero", dls[0].Error)
	require.Equal(t, "22012", dls[0].SQLState)
	require.Contains(t, dls[0].Trace, fn, "the SQL context names the callback")
	require.Zero(t, dls[0].Retries)
	require.Zero(t, e.deliveries(belt))
	var published int
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT count(*) FROM change_private.outbox WHERE channel = 'belts'
		AND kind = 'dead_letter' AND payload ->> 'belt_id' = $1 AND payload ->> 'event_id' = 'e1'`, fmt.Sprint(belt)).Scan(&published))
	require.Equal(t, 1, published, "the dead letter is published on channel belts")

	// Fixed callback, replayed; the event is gone from the store by then: the dead letter's copy is used.
	_, err := e.tx.Exec(e.ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION public.%s(h jsonb, p jsonb, profile jsonb DEFAULT NULL)
		RETURNS jsonb LANGUAGE sql AS $f$ SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{visits,fixed}'), 'yes') $f$`, fn))
	require.NoError(t, err)
	_, err = e.tx.Exec(e.ctx, `DELETE FROM event.events WHERE event_id = 'e1'`)
	require.NoError(t, err)
	n, err := e.q.BeltDeadLetterReplay(e.ctx, db.BeltDeadLetterReplayParams{BeltID: belt})
	require.NoError(t, err)
	require.Equal(t, int32(1), n)
	n, err = e.q.BeltDeadLetterReplay(e.ctx, db.BeltDeadLetterReplayParams{BeltID: belt})
	require.NoError(t, err)
	require.Zero(t, n, "replayed already")
	r = e.step(belt)
	require.Equal(t, int32(1), r.Processed)
	require.Contains(t, e.grain("c1", "/visits/fixed"), `"yes"`)
	dls = e.deadLetters(belt)
	require.Len(t, dls, 1)
	require.NotNil(t, dls[0].Replayed)
	// Named ids replay again; ids of nothing are skipped.
	n, err = e.q.BeltDeadLetterReplay(e.ctx, db.BeltDeadLetterReplayParams{BeltID: belt, IDs: []int64{-5}})
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestBeltProcessRetryBacksOffThenGivesUp(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", map[string]string{"RETRY_MAX_RETRIES": "2",
		"RETRY_BACK_OFF_INITIAL_INTERVAL_SEC": "10", "RETRY_BACK_OFF_MULTIPLIER": "3", "RETRY_BACK_OFF_INTERVAL_MAX_SEC": "20"})
	e.ingest(`e1 c1 {"retry": "not yet"}`, `e2 c1 {"page": "/waits"}`, `e3 other {"page": "/goes"}`)
	r := e.step(belt)
	require.Equal(t, int32(1), r.Processed, "the other lane is processed")
	require.Equal(t, int32(1), r.Retried)
	require.Equal(t, int32(1), r.Failed)
	require.Zero(t, r.DeadLettered)
	require.Equal(t, "", e.grain("c1", "/visits/last"), "later events of the lane wait")
	require.Contains(t, e.grain("other", "/visits/last"), "/goes")
	attempts, wait, state := e.lane(belt, "c1")
	require.Equal(t, 1, attempts)
	require.InDelta(t, 10, wait.Seconds(), 1, "the initial back-off")
	require.Equal(t, "SBRTY", state)
	require.Zero(t, e.step(belt).Taken, "the lane waits")

	e.readyAgain(belt)
	r = e.step(belt)
	require.Equal(t, int32(1), r.Retried)
	attempts, wait, _ = e.lane(belt, "c1")
	require.Equal(t, 2, attempts)
	require.InDelta(t, 20, wait.Seconds(), 1, "10 * 3, capped at 20")

	e.readyAgain(belt)
	r = e.step(belt)
	require.Equal(t, int32(1), r.DeadLettered, "two retries made: the third failure gives up")
	require.Zero(t, r.Processed)
	require.Equal(t, int32(1), e.step(belt).Processed, "and the lane goes on at once")
	require.Contains(t, e.grain("c1", "/visits/last"), "/waits")
	attempts, wait, state = e.lane(belt, "c1")
	require.Zero(t, attempts)
	require.Zero(t, wait)
	require.Empty(t, state)
	dls := e.deadLetters(belt)
	require.Len(t, dls, 1)
	require.Equal(t, "SBRTX", dls[0].SQLState)
	require.Equal(t, 2, dls[0].Retries)
	require.Equal(t, "retries exhausted after 2 retries: not yet", dls[0].Error)
	d := e.parse(must(e.q.BeltGet(e.ctx, belt)))
	require.Equal(t, int64(2), d.Retried)
	require.Equal(t, int64(3), d.Failed)
	require.Equal(t, int64(1), d.DeadLettered)
	require.Equal(t, int64(2), d.Processed)
}

func TestBeltProcessNoRetryWithMaxRetriesZero(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", map[string]string{"RETRY_MAX_RETRIES": "0"})
	e.ingest(`e1 c1 {"retry": "never"}`, `e2 c1 {"page": "/next"}`)
	r := e.step(belt)
	require.Equal(t, int32(1), r.DeadLettered)
	require.Zero(t, r.Retried)
	require.Zero(t, r.Processed, "the events after it wait for the next step")
	require.Equal(t, int32(1), e.step(belt).Processed, "which finds the lane ready at once")
	require.Equal(t, "retries exhausted after 0 retries: never", e.deadLetters(belt)[0].Error)
}

func TestBeltProcessTransientErrorWaitsNeverDeadLetters(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	fn := e.name("locked")
	_, err := e.tx.Exec(e.ctx, `CREATE FUNCTION public.`+fn+`(h jsonb, p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $f$
		BEGIN RAISE EXCEPTION 'could not obtain lock' USING ERRCODE = '55P03'; END $f$`)
	require.NoError(t, err)
	belt := e.belt(fn, "", map[string]string{"RETRY_MAX_RETRIES": "0", "RETRY_BACK_OFF_INITIAL_INTERVAL_SEC": "5"})
	e.ingest(`e1 c1 {"lock": true}`)
	r := e.step(belt)
	require.Zero(t, r.DeadLettered, "a transient error says nothing of the event")
	require.Equal(t, int32(1), r.Retried)
	attempts, wait, state := e.lane(belt, "c1")
	require.Equal(t, 1, attempts)
	require.InDelta(t, 5, wait.Seconds(), 1)
	require.Equal(t, "55P03", state)
	require.Equal(t, 1, e.deliveries(belt))
}

func TestBeltProcessFetchProfileTrue(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	// Copies what the profile says of the entity into the update: its id and the visits so far.
	fn := e.fn("prof", "(h jsonb, p jsonb, profile jsonb) RETURNS jsonb", `
		SELECT api.set_value(api.update(profile ->> 'correlationId', '{seen}'),
		       coalesce(profile #>> '{jsonPayload,seen,_latest,_v}', 'none') || '>' || (p ->> 'page'))`)
	belt := e.belt(fn, "TRUE", nil)
	e.ingest(`e1 c1 {"page": "/a"}`)
	require.Equal(t, int32(1), e.step(belt).Processed)
	require.Contains(t, e.grain("c1", "/seen"), `"none>/a"`, "a new profile is passed empty, with its id")
	e.ingest(`e2 c1 {"page": "/b"}`)
	require.Equal(t, int32(1), e.step(belt).Processed)
	require.Contains(t, e.grain("c1", "/seen"), `"none>/a>/b"`, "the profile as the step finds it")
}

func TestBeltProcessLinkingRedirection(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", nil)
	_, err := e.q.ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(
		`[{"_id": "old-1", "_path": ["new"], "_operation": "_profile_link", "_value": {"_v": "new-1"}}]`)})
	require.NoError(t, err)
	e.ingest(`e1 old-1 {"page": "/via-old"}`, `e2 new-1 {"page": "/via-new"}`)
	// Both events share the new id's lane, in the order they were stored.
	var lanes []int
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT array(SELECT d.lane FROM event.deliveries d JOIN belt.belts b ON b.consumer_id = d.consumer_id
		WHERE b.id = $1 ORDER BY d.id)`, belt).Scan(&lanes))
	require.Len(t, lanes, 2)
	require.Equal(t, lanes[0], lanes[1])
	require.Equal(t, int32(2), e.step(belt).Processed)
	require.Contains(t, e.grain("new-1", "/visits/last"), "/via-new")
	require.Equal(t, "", e.grain("old-1", "/visits/last"), "updates for the old id go to the new one")
	var count string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT value ->> '_current' FROM profile.profilestore
		WHERE correlation_id = 'new-1' AND path = '/visits/count' AND pit = '_latest'`).Scan(&count))
	require.Equal(t, "2", count)
}

func TestBeltProcessDroppedCallbackFailsTheBelt(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	fn := e.visitFn()
	belt := e.belt(fn, "", nil)
	e.ingest(`e1 c1 {"page": "/a"}`)
	_, err := e.tx.Exec(e.ctx, "DROP FUNCTION public."+fn)
	require.NoError(t, err)
	r := e.step(belt)
	require.Zero(t, r.Taken)
	d := e.parse(must(e.q.BeltGet(e.ctx, belt)))
	require.Equal(t, "FAILED", d.Status)
	require.Contains(t, *d.StatusReason, "does not exist")
	require.Equal(t, 1, e.deliveries(belt), "the event waits for the belt to be fixed")
	require.Empty(t, e.deadLetters(belt))
	require.Zero(t, e.step(belt).Taken, "a failed belt is not processed")
}

func TestBeltProcessStoppedBeltWaits(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", nil)
	_, err := e.q.BeltSetState(e.ctx, db.BeltSetStateParams{ID: belt, Action: "STOP"})
	require.NoError(t, err)
	e.ingest(`e1 c1 {"page": "/a"}`)
	require.Zero(t, e.step(belt).Taken)
	_, err = e.q.BeltSetState(e.ctx, db.BeltSetStateParams{ID: belt, Action: "START"})
	require.NoError(t, err)
	require.Equal(t, int32(1), e.step(belt).Processed)
}

func TestBeltProcessLongRunningAndBatchLimits(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	fn := e.fn("slow", "(h jsonb, p jsonb) RETURNS jsonb", `SELECT CASE WHEN p ? 'slow' THEN (SELECT NULL::jsonb FROM pg_sleep(0.06)) END`)
	belt := e.belt(fn, "", map[string]string{"CALLBACK_LONGRUNNING_SEC": "0.03"})
	e.ingest(`e1 c1 {"slow": true}`, `e2 c2 {}`, `e3 c3 {}`, `e4 c4 {"slow": true}`)
	max := int32(2)
	r, err := e.q.BeltProcess(e.ctx, db.BeltProcessParams{BeltID: &belt, MaxEvents: &max})
	require.NoError(t, err)
	require.Equal(t, int32(2), r.Taken, "at most p_max_events")
	require.True(t, r.More)
	r = e.step(belt)
	require.Equal(t, int32(2), r.Taken)
	d := e.parse(must(e.q.BeltGet(e.ctx, belt)))
	require.Equal(t, int64(2), d.LongRunning)
	require.Equal(t, int64(4), d.Processed)
}

// more says whether another step may find work: the step took p_max_events, or one of its
// lanes gave it its whole share (p_max_events over the lanes it holds).
func TestBeltProcessMoreWhenALaneGaveItsShare(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", nil)
	var other string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT c FROM unnest(ARRAY['c2', 'c3', 'c4', 'c5', 'c6']) c
		WHERE event_private.lane_of(c, 64::smallint) <> event_private.lane_of('c1', 64::smallint) LIMIT 1`).Scan(&other))
	e.ingest(`e1 c1 {"page": "/a"}`, `e2 c1 {"page": "/b"}`, `e3 c1 {"page": "/c"}`, `e4 `+other+` {"page": "/x"}`)
	max := int32(4)
	r, err := e.q.BeltProcess(e.ctx, db.BeltProcessParams{BeltID: &belt, MaxEvents: &max})
	require.NoError(t, err)
	require.Equal(t, int32(2), r.Lanes)
	require.Equal(t, int32(3), r.Taken, "a share of 2 from c1's lane, 1 from the other")
	require.True(t, r.More, "c1's lane gave its whole share")
	r, err = e.q.BeltProcess(e.ctx, db.BeltProcessParams{BeltID: &belt, MaxEvents: &max})
	require.NoError(t, err)
	require.Equal(t, int32(1), r.Taken)
	require.False(t, r.More, "the lane gave less than its share: it held no more")
	require.Equal(t, fmt.Sprintf(`"/c"@/belts/%d`, belt), e.grain("c1", "/visits/last"))
	require.Zero(t, e.deliveries(belt))
}

func TestBeltProcessRefusals(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	missing := int64(1 << 60)
	require.Equal(t, "SLNFD", e.fails(func(q *db.Queries) error {
		_, err := q.BeltProcess(e.ctx, db.BeltProcessParams{BeltID: &missing})
		return err
	}).Code)
	zero := int32(0)
	require.Equal(t, "SLINV", e.fails(func(q *db.Queries) error {
		_, err := q.BeltProcess(e.ctx, db.BeltProcessParams{MaxEvents: &zero})
		return err
	}).Code)
	require.Equal(t, "SLNFD", e.fails(func(q *db.Queries) error {
		_, err := q.BeltDeadLetterReplay(e.ctx, db.BeltDeadLetterReplayParams{BeltID: missing})
		return err
	}).Code)
	require.Equal(t, "SLINV", e.fails(func(q *db.Queries) error {
		_, err := q.BeltDeadLetterList(e.ctx, db.BeltDeadLetterListParams{BeltID: e.belt(e.visitFn(), "", nil), PageSize: 0})
		return err
	}).Code)
}

func must(raw json.RawMessage, err error) json.RawMessage {
	if err != nil {
		panic(err)
	}
	return raw
}

// Several connections step the same belt at once: every correlation id's updates are applied in
// the order its events were stored, and every event exactly once, on both partitioning backends.
func TestBeltProcessConcurrentStepsKeepOrder(t *testing.T) {
	t.Parallel()
	onBothBackends(t, testBeltConcurrentOrder)
}

func testBeltConcurrentOrder(t *testing.T, pool *pgxpool.Pool, backend string) {
	ctx := context.Background()
	var got string
	require.NoError(t, pool.QueryRow(ctx, `SELECT backend FROM partition.tables WHERE relation = 'event.events'::regclass`).Scan(&got))
	require.Equal(t, backend, got)
	typ := "ordered-" + backend
	_, err := pool.Exec(ctx, `CREATE FUNCTION public.seq_`+backend+`(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $f$
		SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{seq}', '_array_append'), jsonb_build_array(p ->> 'n')) $f$`)
	require.NoError(t, err)
	raw, err := db.New(pool).BeltCreate(ctx, json.RawMessage(fmt.Sprintf(
		`{"name": "order-%s", "eventTypes": [%q], "sqlCallback": "seq_%s"}`, backend, typ, backend)))
	require.NoError(t, err)
	var doc struct{ ID string }
	require.NoError(t, json.Unmarshal(raw, &doc))
	var belt int64
	fmt.Sscan(doc.ID, &belt)

	const ids, per = 40, 25
	var events []string
	for n := range per {
		for c := range ids {
			events = append(events, fmt.Sprintf(`e-%d-%d c%d {"n": "%03d"}`, c, n, c, n))
		}
	}
	// Ingested in several calls, while steps run.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := db.New(pool)
			max := int32(37)
			for {
				var r db.BeltProcessRow
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var err error
					r, err = q.WithTx(tx).BeltProcess(ctx, db.BeltProcessParams{BeltID: &belt, MaxEvents: &max})
					return err
				})
				if !evNoErr(t, err) {
					return
				}
				if r.Taken == 0 {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
				}
			}
		}()
	}
	for i := 0; i < len(events); i += 100 {
		ingestEvents(t, pool, typ, events[i:min(i+100, len(events))]...)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var left int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM event.deliveries d JOIN belt.belts b ON b.consumer_id = d.consumer_id
			WHERE b.id = $1`, belt).Scan(&left))
		if left == 0 || time.Now().After(deadline) {
			require.Zero(t, left, "deliveries left")
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	want := make([]string, per)
	for n := range per {
		want[n] = fmt.Sprintf("%03d", n)
	}
	for c := range ids {
		var seq []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array(SELECT jsonb_array_elements_text(value)) FROM profile.profilestore
			WHERE correlation_id = $1 AND path = '/seq' AND pit = '_latest'`, fmt.Sprintf("c%d", c)).Scan(&seq))
		require.Equal(t, want, seq, "c%d: every event once, in order", c)
	}
	var processed int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT (api.belt_get($1) ->> 'processed')::bigint`, belt).Scan(&processed))
	require.Equal(t, int64(ids*per), processed)
}

// A step whose backend is terminated mid-callback applies nothing and leaves its deliveries; the
// next step applies each event once.
func TestBeltProcessKilledStepLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `CREATE FUNCTION public.hold(h jsonb, p jsonb) RETURNS jsonb LANGUAGE sql AS $f$
		SELECT api.set_value(api.update(h ->> 'grnry-correlation-id', '{n}', '_inc'), '0|1|1')
		FROM (SELECT pg_advisory_lock_shared(4242)) l $f$`)
	require.NoError(t, err)
	_, err = db.New(pool).BeltCreate(ctx, json.RawMessage(`{"name": "hold", "eventTypes": ["held"], "sqlCallback": "hold"}`))
	require.NoError(t, err)
	ingestEvents(t, pool, "held", `h1 c1 {}`, `h2 c1 {}`, `h3 c2 {}`)

	blocker, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer blocker.Release()
	_, err = blocker.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)

	stepper, err := pool.Acquire(ctx)
	require.NoError(t, err)
	var pid int
	require.NoError(t, stepper.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		_, err := db.New(stepper).BeltProcess(ctx, db.BeltProcessParams{})
		done <- err
	}()
	// Wait until the step waits for the lock inside the callback, then kill its backend.
	require.Eventually(t, func() bool {
		var waiting bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')`, pid).Scan(&waiting)
		return waiting
	}, 20*time.Second, 10*time.Millisecond)
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	require.Error(t, <-done)
	stepper.Conn().Close(ctx)
	stepper.Release()
	// The client hears of the kill before the backend has rolled back and let go of its lanes.
	require.Eventually(t, func() bool {
		var alive bool
		_ = pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive)
		return !alive
	}, 20*time.Second, 10*time.Millisecond)
	_, err = blocker.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	require.NoError(t, err)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM profile.profilestore WHERE path = '/n'`).Scan(&n))
	require.Zero(t, n, "the killed step applied nothing")
	r, err := db.New(pool).BeltProcess(ctx, db.BeltProcessParams{})
	require.NoError(t, err)
	require.Equal(t, int32(3), r.Processed)
	var c1 string
	require.NoError(t, pool.QueryRow(ctx, `SELECT value ->> '_current' FROM profile.profilestore
		WHERE correlation_id = 'c1' AND path = '/n' AND pit = '_latest'`).Scan(&c1))
	require.Equal(t, "2", c1, "each event once")
}

// pyBeltOf creates a Python belt of the test's event type with source src.
func (e *beltEnv) pyBeltOf(src, fetch string, env map[string]string) int64 {
	e.t.Helper()
	var extra []map[string]string
	for k, v := range env {
		extra = append(extra, map[string]string{"name": k, "value": v})
	}
	fields := map[string]any{"name": "$NAME", "eventTypes": []string{e.evType()}, "extractorFn": src, "fetchProfile": fetch}
	if extra != nil {
		fields["extraEnv"] = extra
	}
	d := e.create(fields)
	require.Equal(e.t, "RUNNING", d.Status, "%v", d.StatusReason)
	return e.id(d)
}

// The seed's simple callback, unchanged, end to end: FETCH_PROFILE TRUE gives it the profile of a
// correlation id it has never seen, and its update lands in the store.
func TestBeltProcessPythonSeedCallback(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	requirePython(t, e.tx)
	belt := e.pyBeltOf(pyTestdata(t, "seed_simple.py"), "TRUE", nil)
	e.ingest(`e1 visitor-9 {"body": "{}"}`)
	r := e.step(belt)
	require.Equal(t, int32(1), r.Processed, "%+v", r)
	var v, origin, ttl string
	var c float64
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT value #>> '{}', origin, ttl, certainty FROM profile.profilestore
		WHERE correlation_id = 'visitor-9' AND profile_type = 'TestProfileType' AND path = '/dummy' AND pit = '_latest'`).Scan(&v, &origin, &ttl, &c))
	require.Equal(t, "Hello Belt!", v)
	require.Equal(t, "Dummy-Belt", origin)
	require.Equal(t, "P1D", ttl)
	require.Equal(t, 0.5, c)
}

// A Python belt's outcomes through the step: RetryException waits with back-off, an exception is
// dead-lettered with its traceback, a timeout is retried, LAZY fetches profiles itself, and the
// default _origin is the belt's.
func TestBeltProcessPythonOutcomes(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	requirePython(t, e.tx)
	src := `from grnry_belt.exceptions.exception import RetryException
import time

def execute(event_headers, event_payload, profile=None):
    cid = event_headers['grnry-correlation-id']
    kind = event_payload.get('kind')
    if kind == 'retry':
        raise RetryException('not yet')
    if kind == 'boom':
        raise ValueError('bad payload')
    if kind == 'slow':
        time.sleep(5)
    seen = profileClient.getProfile(cid)
    u = Update(cid, ['seen'])
    u.set_value('yes' if seen else 'no')
    return [u]
`
	belt := e.pyBeltOf(src, "LAZY", map[string]string{"CALLBACK_TIMEOUT_SEC": "0.3", "RETRY_BACK_OFF_INITIAL_INTERVAL_SEC": "7"})
	e.ingest(`e1 c1 {}`, `e2 c2 {"kind": "retry"}`, `e3 c2 {}`, `e4 c3 {"kind": "boom"}`, `e5 c4 {"kind": "slow"}`)
	r := e.step(belt)
	require.Equal(t, int32(1), r.Processed, "%+v", r)
	require.Equal(t, int32(2), r.Retried, "the retry and the timeout")
	require.Equal(t, int32(1), r.DeadLettered)
	require.Equal(t, int32(3), r.Failed)
	require.Equal(t, fmt.Sprintf(`"no"@/belts/%d`, belt), e.grain("c1", "/seen"))
	require.Equal(t, "", e.grain("c2", "/seen"), "the event after the retry waits")
	attempts, wait, state := e.lane(belt, "c2")
	require.Equal(t, 1, attempts)
	require.InDelta(t, 7, wait.Seconds(), 1)
	require.Equal(t, "SBRTY", state)
	_, _, state = e.lane(belt, "c4")
	require.Equal(t, "57014", state)
	dls := e.deadLetters(belt)
	require.Len(t, dls, 1)
	require.Equal(t, "ValueError: bad payload", dls[0].Error)
	require.Contains(t, dls[0].Trace, "raise ValueError")
	require.Empty(t, dls[0].SQLState)

	// LAZY: the profile exists now.
	e.ingest(`e6 c1 {}`)
	require.Equal(t, int32(1), e.step(belt).Processed)
	require.Contains(t, e.grain("c1", "/seen"), `"yes"`)
}

func TestBeltDeadLetterTrim(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	belt := e.belt(e.visitFn(), "", nil)
	e.ingest(`e1 c1 {"boom": true}`, `e2 c2 {"boom": true}`)
	require.Equal(t, int32(2), e.step(belt).DeadLettered)
	_, err := e.tx.Exec(e.ctx, `UPDATE belt.dead_letters SET created = now() - interval '40 days' WHERE event_id = 'e1' AND belt_id = $1`, belt)
	require.NoError(t, err)
	var n int
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT api.belt_dead_letter_trim()`).Scan(&n))
	require.Equal(t, 1, n, "older than the default 30 days")
	require.Len(t, e.deadLetters(belt), 1)
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT api.belt_dead_letter_trim(interval '1 day', now() + interval '2 days')`).Scan(&n))
	require.Equal(t, 1, n, "as of a later time")
	require.Equal(t, "SLINV", e.fails(func(q *db.Queries) error {
		_, err := q.BeltDeadLetterTrim(e.ctx, pgtype.Interval{Microseconds: -1, Valid: true})
		return err
	}).Code)
}

// A step hands the store its callbacks' updates as they came: an update with metadata takes the
// store's full validation (with the belt's _origin as its default), an invalid one is
// dead-lettered by the store with the message as the callback built it, and the others apply.
func TestBeltProcessStoreValidatesEveryUpdate(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	fn := e.fn("mixed", "(h jsonb, p jsonb) RETURNS jsonb", `
		SELECT jsonb_build_array(
		    api.set_value(api.update(h ->> 'grnry-correlation-id', '{mixed,ttl}'), p ->> 'page', p_ttl => 'P1D'),
		    jsonb_build_object('_id', h ->> 'grnry-correlation-id', '_path', '["mixed", "bad"]'::jsonb,
		                       '_value', jsonb_build_object('_v', 5)),
		    api.set_value(api.update(h ->> 'grnry-correlation-id', '{mixed,plain}'), p ->> 'page'))`)
	belt := e.belt(fn, "", nil)
	cid := e.name("m")
	e.ingest(`e1 ` + cid + ` {"page": "/a"}`)
	r := e.step(belt)
	require.Equal(t, int32(1), r.Processed)
	require.Equal(t, int32(3), r.Updates)
	require.Equal(t, int32(1), r.UpdatesDeadLettered)
	origin := fmt.Sprintf("@/belts/%d", belt)
	require.Equal(t, `"/a"`+origin, e.grain(cid, "/mixed/ttl"))
	require.Equal(t, `"/a"`+origin, e.grain(cid, "/mixed/plain"))
	require.Equal(t, "", e.grain(cid, "/mixed/bad"))
	var ttl string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT ttl FROM profile.profilestore
		WHERE correlation_id = $1 AND path = '/mixed/ttl' AND pit = '_latest'`, cid).Scan(&ttl))
	require.Equal(t, "P1D", ttl)
	var state, path string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT sqlstate, message ->> '_path' FROM profile.dead_letters
		WHERE correlation_id = $1`, cid).Scan(&state, &path))
	require.Equal(t, "SPVAL", state)
	require.JSONEq(t, `["mixed", "bad"]`, path)
}
