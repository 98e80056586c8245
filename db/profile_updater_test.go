package db_test

// Tests of the asynchronous updater's SQL (sql/040_profile_updater.sql): enqueue, ordered steps,
// unexpected errors in retry and dead-letter mode, throttling status, large arrays.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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
		apiErr, ok := db.ErrorFor(err)
		require.True(t, ok, c)
		require.Equal(t, 400, apiErr.Status, c)
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
			IF NEW.correlation_id = 'poison' THEN RAISE EXCEPTION 'disk on fire'; END IF;
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
	require.Equal(t, "P0001", state)

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
	require.Equal(t, []dl{{"poison", "P0001", "disk on fire"}, {"poison", "P0001", "disk on fire"}}, got)
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
