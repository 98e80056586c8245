package db_test

// Tests of the asynchronous updater's SQL (sql/profile/11_updater.sql, 12_updater_admin.sql): enqueue, ordered steps,
// unexpected errors in retry and dead-letter mode, throttling status, large arrays.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func appendMsg(id string, v string) string {
	return fmt.Sprintf(`{"_operation":"_array_append","_id":%q,"_path":["seq"],"_value":{"_v":[%q]}}`, id, v)
}

// drain runs steps until the stream is empty (or n steps).
func drain(t *testing.T, q *db.Queries, prio string, max int32) (steps int) {
	t.Helper()
	for steps = 0; steps < 1000; steps++ {
		res, err := q.ProfileInboxProcess(context.Background(), db.ProfileInboxProcessParams{Priority: prio, MaxUpdates: &max})
		require.NoError(t, err)
		if res.Taken == 0 {
			return steps
		}
	}
	t.Fatal("inbox did not drain")
	return steps
}

func seqOf(t *testing.T, tx pgx.Tx, id string) []string {
	t.Helper()
	var raw []byte
	err := tx.QueryRow(context.Background(),
		`SELECT value FROM profile.profilestore WHERE correlation_id = $1 AND path = '/seq' AND pit = '_latest'`, id).Scan(&raw)
	if err == pgx.ErrNoRows {
		return nil
	}
	require.NoError(t, err)
	var out []string
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

func TestProfileEnqueueAndProcessInOrder(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = '2' WHERE key = 'updater.lanes_per_step'`)
	require.NoError(t, err)

	// Interleaved ids, several requests: per id the appended sequence must come out in order.
	ids := []string{"a", "b", "c", "d", "e", "f", "g"}
	var want = map[string][]string{}
	for r := 0; r < 5; r++ {
		var msgs []string
		for i := 0; i < 6; i++ {
			for _, id := range ids {
				v := fmt.Sprintf("%d", r*6+i)
				msgs = append(msgs, appendMsg(id, v))
				want[id] = append(want[id], v)
			}
		}
		row, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
		require.NoError(t, err)
		require.EqualValues(t, len(msgs), row.Accepted)
		require.EqualValues(t, len(msgs)-1, *row.LastID-*row.FirstID)
	}
	st, err := q.ProfileUpdaterStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, "high", st[0].Priority)
	require.EqualValues(t, 5*6*len(ids), st[0].Backlog)
	require.True(t, st[1].Throttled, "high backlog 210 > lag barrier 100")

	// Small steps: many steps, each a prefix of its lanes.
	steps := drain(t, q, "high", 7)
	require.Greater(t, steps, 20)
	for _, id := range ids {
		require.Equal(t, want[id], seqOf(t, tx, id), id)
	}
	var left int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.inbox`).Scan(&left))
	require.Zero(t, left)
	st, err = q.ProfileUpdaterStatus(ctx)
	require.NoError(t, err)
	require.False(t, st[1].Throttled)
}

func TestProfileEnqueueRejectsBadInput(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	for _, c := range []struct{ body, prio string }{
		{`"x"`, "high"}, {`42`, "low"}, {`[]`, "urgent"}, {`{}`, ""},
	} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).ProfileEnqueue(context.Background(), db.ProfileEnqueueParams{Updates: []byte(c.body), Priority: c.prio})
			return err
		})
		require.Error(t, err, c)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, c)
		require.Equal(t, "SLINV", pgErr.Code, c)
	}
	// An object is one update; a message that is not an object is accepted and dead-lettered later.
	row, err := q.ProfileEnqueue(context.Background(), db.ProfileEnqueueParams{Updates: []byte(`{"_id":"x","_path":["a"],"_value":{"_v":"1"}}`), Priority: "low"})
	require.NoError(t, err)
	require.EqualValues(t, 1, row.Accepted)
	row, err = q.ProfileEnqueue(context.Background(), db.ProfileEnqueueParams{Updates: []byte(`[1, {"_id": 2}]`), Priority: "low"})
	require.NoError(t, err)
	require.EqualValues(t, 2, row.Accepted)
	max := int32(100)
	res, err := q.ProfileInboxProcess(context.Background(), db.ProfileInboxProcessParams{Priority: "low", MaxUpdates: &max})
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Taken)
	require.EqualValues(t, 1, res.Ok)
	require.EqualValues(t, 2, res.DeadLetter)
	require.JSONEq(t, `{"_set": 2, "invalid": 1}`, string(res.Operations))
}

// poison makes every write of correlation id "poison" fail with an unexpected error.
func poison(t *testing.T, tx pgx.Tx) {
	t.Helper()
	_, err := tx.Exec(context.Background(), `
		CREATE FUNCTION pg_temp.poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.correlation_id = 'poison' THEN RAISE EXCEPTION 'disk on fire' USING ERRCODE = 'io_error'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON profile.profilestore
			FOR EACH ROW EXECUTE FUNCTION pg_temp.poison();`)
	require.NoError(t, err)
}

func TestProfileInboxRetryModeBlocksTheLane(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	poison(t, tx)
	msgs := []string{appendMsg("poison", "1"), appendMsg("healthy", "1"), appendMsg("poison", "2"), appendMsg("healthy", "2")}
	_, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)

	res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Taken, "the healthy lane applies")
	require.EqualValues(t, 1, res.FailedLanes)
	require.Contains(t, *res.Error, "disk on fire")
	require.Equal(t, []string{"1", "2"}, seqOf(t, tx, "healthy"))
	require.Nil(t, seqOf(t, tx, "poison"))

	var attempts int
	var lastErr, state string
	require.NoError(t, tx.QueryRow(ctx, `SELECT attempts, last_error, last_sqlstate FROM profile.inbox_lanes
		WHERE priority = 0 AND retry_at > clock_timestamp()`).Scan(&attempts, &lastErr, &state))
	require.Equal(t, 1, attempts)
	require.Contains(t, lastErr, "disk on fire")
	require.Equal(t, "58030", state)

	// While it waits, the lane is not claimed.
	res, err = q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
	require.NoError(t, err)
	require.Zero(t, res.Taken)
	require.Zero(t, res.Lanes)
	var dead int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.dead_letters`).Scan(&dead))
	require.Zero(t, dead, "retry mode dead-letters nothing")

	// The cause goes away and the back-off passes: the lane applies in order and is healthy again.
	_, err = tx.Exec(ctx, `DROP TRIGGER poison ON profile.profilestore; UPDATE profile.inbox_lanes SET retry_at = now() - interval '1 s' WHERE attempts > 0`)
	require.NoError(t, err)
	res, err = q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Taken)
	require.Equal(t, []string{"1", "2"}, seqOf(t, tx, "poison"))
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.inbox_lanes WHERE attempts > 0`).Scan(&attempts))
	require.Zero(t, attempts)
}

func TestProfileInboxRetryBackOffGrows(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	poison(t, tx)
	_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = '1000' WHERE key = 'updater.retry_base_ms';
		UPDATE silo.settings SET value = '3000' WHERE key = 'updater.retry_max_ms'`)
	require.NoError(t, err)
	_, err = q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte(appendMsg("poison", "1")), Priority: "high"})
	require.NoError(t, err)
	var waits []float64
	for i := 0; i < 4; i++ {
		_, err := tx.Exec(ctx, `UPDATE profile.inbox_lanes SET retry_at = NULL WHERE attempts > 0`)
		require.NoError(t, err)
		res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.FailedLanes)
		var w float64
		require.NoError(t, tx.QueryRow(ctx, `SELECT round(extract(epoch FROM retry_at - last_failed)::numeric, 1)
			FROM profile.inbox_lanes WHERE attempts > 0`).Scan(&w))
		waits = append(waits, w)
	}
	require.Equal(t, []float64{1, 2, 3, 3}, waits, "doubling from retry_base_ms, capped at retry_max_ms")
}

func TestProfileInboxDeadLetterMode(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	poison(t, tx)
	_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = 'dead_letter' WHERE key = 'updater.unexpected_errors'`)
	require.NoError(t, err)
	msgs := []string{appendMsg("poison", "1"), appendMsg("healthy", "1"), appendMsg("poison", "2"), appendMsg("healthy", "2")}
	_, err = q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)
	res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high"})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Taken)
	require.EqualValues(t, 2, res.Ok)
	require.EqualValues(t, 2, res.DeadLetter)
	require.Zero(t, res.FailedLanes)
	require.Equal(t, []string{"1", "2"}, seqOf(t, tx, "healthy"))
	rows, err := tx.Query(ctx, `SELECT correlation_id, sqlstate, reason FROM profile.dead_letters ORDER BY id`)
	require.NoError(t, err)
	type dl struct{ ID, State, Reason string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dl])
	require.NoError(t, err)
	require.Equal(t, []dl{{"poison", "58030", "disk on fire"}, {"poison", "58030", "disk on fire"}}, got)
}

func TestProfileInboxThrottleStatusFollowsSettings(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = '3' WHERE key = 'updater.lag_barrier';
		UPDATE silo.settings SET value = '250' WHERE key = 'updater.wait_time_ms';
		UPDATE silo.settings SET value = '10' WHERE key = 'updater.check_interval_ms'`)
	require.NoError(t, err)
	msgs := []string{appendMsg("a", "1"), appendMsg("b", "1"), appendMsg("c", "1"), appendMsg("d", "1")}
	_, err = q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)
	st, err := q.ProfileUpdaterStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, db.ProfileUpdaterStatusRow{Priority: "low", Throttled: true, WaitMs: 250, CheckIntervalMs: 10, LongRunningMs: 1000},
		st[1])
	require.False(t, st[0].Throttled, "the high stream is never throttled")
	_, err = tx.Exec(ctx, `UPDATE silo.settings SET value = 'false' WHERE key = 'updater.throttle_enabled'`)
	require.NoError(t, err)
	st, err = q.ProfileUpdaterStatus(ctx)
	require.NoError(t, err)
	require.False(t, st[1].Throttled)
}

func TestProfileInboxLargeArrays(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	// 3,000 elements in one update, then appends and a put to the big array.
	vals := make([]string, 3000)
	for i := range vals {
		vals[i] = fmt.Sprintf("%q", fmt.Sprintf("v%04d", i))
	}
	big := `{"_operation":"_array_append","_id":"big","_path":["seq"],"_value":{"_v":[` + strings.Join(vals, ",") + `]}}`
	msgs := []string{big, big, appendMsg("big", "last"),
		`{"_operation":"_array_put","_id":"big","_path":["seq"],"_value":{"_v":["v0001","new"]}}`}
	_, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)
	drain(t, q, "high", 500)
	got := seqOf(t, tx, "big")
	require.Len(t, got, 6002)
	require.Equal(t, "last", got[6000])
	require.Equal(t, "new", got[6001])
}

func sqlstateOf(t *testing.T, err error) string {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	return pgErr.Code
}

// A step never takes more messages than asked, however many lanes are ready.
func TestProfileInboxProcessHonoursTheLimit(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	var msgs []string
	for i := 0; i < 30; i++ {
		msgs = append(msgs, appendMsg(fmt.Sprintf("id-%d", i), "1"))
	}
	_, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "low"})
	require.NoError(t, err)
	for _, max := range []int32{1, 3} {
		res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "low", MaxUpdates: &max})
		require.NoError(t, err)
		require.EqualValues(t, max, res.Taken)
		require.EqualValues(t, max, res.Lanes)
		require.True(t, res.More)
	}
	// The oldest lanes first: id-0 .. id-3 were applied.
	for i := 0; i < 4; i++ {
		require.Equal(t, []string{"1"}, seqOf(t, tx, fmt.Sprintf("id-%d", i)))
	}
	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		zero := int32(0)
		_, err := db.New(tx).ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "low", MaxUpdates: &zero})
		return err
	})
	require.Equal(t, "SLINV", sqlstateOf(t, err))
}

// Changing updater.lanes moves the waiting messages: every message sits in hashtext(_id) mod the
// new count, the lane rows follow, and every id's order survives.
func TestProfileInboxLaneCountChange(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	var msgs []string
	for i := 0; i < 5; i++ {
		for _, id := range ids {
			msgs = append(msgs, appendMsg(id, fmt.Sprint(i)))
		}
	}
	msgs = append(msgs, `{"_id": 7, "_path": ["x"], "_value": {"_v": "1"}}`) // lane 0 whatever the count
	_, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)
	// Apply a little under 64 lanes, then re-lane what is left to 5.
	one := int32(6)
	_, err = q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high", MaxUpdates: &one})
	require.NoError(t, err)

	lanesOK := func(n int) {
		t.Helper()
		var rows, misplaced, maxLane int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*), max(lane) FROM profile.inbox_lanes`).Scan(&rows, &maxLane))
		require.Equal(t, 2*n, rows)
		require.Equal(t, n-1, maxLane)
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.inbox i
			WHERE i.lane <> CASE WHEN jsonb_typeof(i.message -> '_id') = 'string'
			                     THEN (hashtext(i.message ->> '_id') & 2147483647) % $1 ELSE 0 END`, n).Scan(&misplaced))
		require.Zero(t, misplaced)
	}
	_, err = tx.Exec(ctx, `UPDATE silo.settings SET value = '5' WHERE key = 'updater.lanes'`)
	require.NoError(t, err)
	lanesOK(5)
	// New messages go to the new lanes.
	_, err = q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte(appendMsg("a", "5")), Priority: "high"})
	require.NoError(t, err)
	lanesOK(5)
	// Invalid values are refused; a deleted setting means the default, 64.
	for _, v := range []string{"0", "1025", "many", ""} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = $1 WHERE key = 'updater.lanes'`, v)
			return err
		})
		require.Equal(t, "SLINV", sqlstateOf(t, err), v)
	}
	_, err = tx.Exec(ctx, `DELETE FROM silo.settings WHERE key = 'updater.lanes'`)
	require.NoError(t, err)
	lanesOK(64)
	_, err = tx.Exec(ctx, `INSERT INTO silo.settings (key, value, description) VALUES ('updater.lanes', '3', 'lanes')`)
	require.NoError(t, err)
	lanesOK(3)

	drain(t, q, "high", 4)
	for _, id := range ids {
		want := []string{"0", "1", "2", "3", "4"}
		if id == "a" {
			want = append(want, "5")
		}
		require.Equal(t, want, seqOf(t, tx, id), id)
	}
}

// Every updater setting is checked when it changes.
func TestProfileUpdaterSettingsAreChecked(t *testing.T) {
	tx := dbtest.Tx(t)
	ctx := context.Background()
	for _, c := range []struct {
		key, value string
		ok         bool
	}{
		{"updater.batch_size", "0", false}, {"updater.batch_size", "abc", false}, {"updater.batch_size", "250", true},
		{"updater.lanes_per_step", "-1", false}, {"updater.lanes_per_step", "16", true},
		{"updater.unexpected_errors", "sometimes", false}, {"updater.unexpected_errors", "dead_letter", true},
		{"updater.throttle_enabled", "yes", false}, {"updater.throttle_enabled", "false", true},
		{"updater.lag_barrier", "1e3", false}, {"updater.lag_barrier", "0", true},
		{"updater.wait_time_ms", "1s", false}, {"updater.check_interval_ms", "5000", true},
		{"updater.retry_base_ms", "0", false}, {"updater.retry_max_ms", "0", true},
		{"updater.long_running_ms", "", false}, {"updater.long_running_ms", "250", true},
	} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE silo.settings SET value = $2 WHERE key = $1`, c.key, c.value)
			return err
		})
		if c.ok {
			require.NoError(t, err, c)
		} else {
			require.Equal(t, "SLINV", sqlstateOf(t, err), c)
		}
	}
}

// An operator moves the message a lane is stuck at to the dead letter table: the lane goes on.
func TestProfileInboxDeadLetterUnblocksTheLane(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	_, err := tx.Exec(ctx, `
		CREATE FUNCTION pg_temp.boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.value::text LIKE '%boom%' THEN RAISE EXCEPTION 'cannot store boom' USING ERRCODE = 'io_error'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER boom BEFORE INSERT OR UPDATE ON profile.profilestore
			FOR EACH ROW EXECUTE FUNCTION pg_temp.boom();`)
	require.NoError(t, err)
	msgs := []string{appendMsg("s", "1"), appendMsg("s", "boom"), appendMsg("s", "2"), appendMsg("s", "3")}
	row, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "low"})
	require.NoError(t, err)
	res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "low"})
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Taken)
	require.EqualValues(t, 1, res.FailedLanes)

	lanes, err := q.ProfileInboxBlockedLanes(ctx)
	require.NoError(t, err)
	require.Len(t, lanes, 1)
	stuck := *row.FirstID + 1
	require.Equal(t, "low", lanes[0].Priority)
	require.Equal(t, stuck, lanes[0].MessageID)
	require.Equal(t, "s", lanes[0].CorrelationID)
	require.EqualValues(t, 3, lanes[0].Waiting)

	// A message that is not there.
	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ProfileInboxDeadLetter(ctx, db.ProfileInboxDeadLetterParams{ID: *row.FirstID})
		return err
	})
	require.Equal(t, "SLNFD", sqlstateOf(t, err))

	dl, err := q.ProfileInboxDeadLetter(ctx, db.ProfileInboxDeadLetterParams{ID: stuck})
	require.NoError(t, err)
	var state, reason, msg string
	require.NoError(t, tx.QueryRow(ctx, `SELECT sqlstate, reason, message->'_value'->'_v'->>0 FROM profile.dead_letters WHERE id = $1`, dl).
		Scan(&state, &reason, &msg))
	require.Equal(t, "SPSKP", state)
	require.Contains(t, reason, "cannot store boom")
	require.Equal(t, "boom", msg)
	lanes, err = q.ProfileInboxBlockedLanes(ctx)
	require.NoError(t, err)
	require.Empty(t, lanes, "the lane is ready again")

	res, err = q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "low"})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Taken)
	require.Equal(t, []string{"1", "2", "3"}, seqOf(t, tx, "s"))
}

// api.profile_enqueue notifies silo_inbox with the stream's name when it starts a lane's backlog,
// and not behind messages waiting in the lane.
func TestProfileEnqueueNotifies(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN silo_inbox`)
	require.NoError(t, err)
	q := db.New(pool)
	for _, c := range []struct{ body, prio string }{
		{`[]`, "low"},                 // nothing accepted: no notification
		{appendMsg("n", "1"), "low"},  // the lane was empty: low
		{appendMsg("n", "2"), "low"},  // behind a waiting message: none
		{appendMsg("n", "1"), "high"}, // the high stream's lane was empty: high
		{appendMsg("n", "3"), "low"},  // none
		{`[` + appendMsg("n", "4") + `,` + appendMsg("m", "1") + `]`, "low"}, // m's lane was empty: low (unless m shares n's lane)
	} {
		_, err = q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte(c.body), Priority: c.prio})
		require.NoError(t, err)
	}
	var sameLane bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT profile_private.inbox_lane('{"_id":"n"}', 64) = profile_private.inbox_lane('{"_id":"m"}', 64)`).Scan(&sameLane))
	want := []string{"low", "high", "low"}
	if sameLane {
		want = want[:2]
	}
	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		got = append(got, n.Payload)
	}
	require.Equal(t, want, got)
	_, err = conn.Exec(ctx, `UNLISTEN *`)
	require.NoError(t, err)
}

// A change of updater.lanes waits for the enqueues in progress, and an enqueue that waited for a
// change in progress uses the new lane count.
func TestProfileEnqueueWaitsForALaneCountChange(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	// An id whose lane differs between 64 and 8 lanes.
	var id string
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'x' || n FROM generate_series(1, 100) n
		WHERE profile_private.inbox_lane(jsonb_build_object('_id', 'x' || n), 64) >= 8 LIMIT 1`).Scan(&id))

	// The enqueue runs on a session whose plans are cached already (generic plans after five runs).
	enq, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer enq.Release()
	for i := 0; i < 7; i++ {
		_, err := db.New(enq).ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte(`[]`), Priority: "high"})
		require.NoError(t, err)
	}

	change, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer change.Rollback(ctx)
	_, err = change.Exec(ctx, `UPDATE silo.settings SET value = '8' WHERE key = 'updater.lanes'`)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := db.New(enq).ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte(appendMsg(id, "1")), Priority: "high"})
		done <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%profile_enqueue%'`).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 10*time.Millisecond, "the enqueue waits for the change")
	require.NoError(t, change.Commit(ctx))
	require.NoError(t, <-done)

	var lane, want int
	require.NoError(t, pool.QueryRow(ctx, `SELECT lane, profile_private.inbox_lane(message, 8) FROM profile.inbox`).Scan(&lane, &want))
	require.Equal(t, want, lane)
	require.Less(t, lane, 8)
}
