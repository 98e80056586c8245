package db_test

// Tests of the change log (sql/change/): the rows the triggers write, sequencing in commit
// order, the subscriber's filter (api.changes_since), resuming (api.change_resume) and trimming.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// pendingChange is a row of silo.change_pending without its id and time.
type pendingChange struct {
	Channel, Kind string
	Payload       string // canonical JSON
	Readers       []string
}

func (c pendingChange) String() string {
	return fmt.Sprintf("%s %s %s %v", c.Channel, c.Kind, c.Payload, c.Readers)
}

// takePending returns the distinct pending changes written since the last call, as
// api.change_sequence will number them (sorted, so that the test does not depend on how many
// statements the write path uses), and deletes them.
func (e *applyEnv) takePending() []string {
	e.t.Helper()
	rows, err := e.tx.Query(e.ctx, `SELECT channel, kind, payload::text, readers FROM api.changes_pending()`)
	require.NoError(e.t, err)
	defer func() {
		_, err := e.tx.Exec(e.ctx, `DELETE FROM silo.change_pending`)
		require.NoError(e.t, err)
	}()
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var c pendingChange
		if err := row.Scan(&c.Channel, &c.Kind, &c.Payload, &c.Readers); err != nil {
			return "", err
		}
		var v any
		if err := json.Unmarshal([]byte(c.Payload), &v); err != nil {
			return "", err
		}
		b, _ := json.Marshal(v) // keys sorted
		c.Payload = string(b)
		return c.String(), nil
	})
	require.NoError(e.t, err)
	slices.Sort(list)
	return slices.Compact(list)
}

// profileChange is the expected pending change of a profile.
func (e *applyEnv) profileChange(typ, name, kind, reader string, paths ...string) string {
	b, _ := json.Marshal(map[string]any{"profile_type": typ, "correlation_id": e.id(name), "paths": paths})
	return pendingChange{Channel: "profile:" + typ + ":" + e.id(name), Kind: kind, Payload: string(b), Readers: []string{reader}}.String()
}

func sorted(xs ...string) []string {
	slices.Sort(xs)
	return xs
}

func TestChangeTriggersWriteOneRowPerProfileAndReader(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)

	// New grains: one row per profile and reader; a reader's row holds only its paths.
	e.batch(
		`{"_id":"$A","_profile_type":"customer","_path":["a","b"],"_value":{"_v":"1"}}`,
		`{"_id":"$A","_profile_type":"customer","_path":["c"],"_value":{"_v":"1"}}`,
		`{"_id":"$A","_profile_type":"customer","_path":["s"],"_value":{"_v":"x","_reader":"secret"}}`,
		`{"_id":"$B","_profile_type":"customer","_path":["a"],"_value":{"_v":"z","_reader":"_all"}}`)
	require.Equal(t, sorted(
		e.profileChange("customer", "$A", "changed", "_auth", "/a/b", "/c"),
		e.profileChange("customer", "$A", "changed", "secret", "/s"),
		e.profileChange("customer", "$B", "changed", "_all", "/a"),
	), e.takePending())

	// An update: the new value's path.
	e.one(`{"_id":"$A","_profile_type":"customer","_path":["a","b"],"_value":{"_v":"2"}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/a/b")}, e.takePending())

	// A new reader: the old reader learns that the grain changed (it can no longer read it), and the new one.
	e.one(`{"_id":"$A","_profile_type":"customer","_path":["s"],"_value":{"_v":"x","_reader":"other"}}`)
	require.Equal(t, sorted(
		e.profileChange("customer", "$A", "changed", "other", "/s"),
		e.profileChange("customer", "$A", "changed", "secret", "/s"),
	), e.takePending())

	// History: the archived pit and the new _latest are one path.
	e.one(`{"_operation":"_set_with_history","_id":"$A","_profile_type":"customer","_path":["a","b"],"_value":{"_v":"3"}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/a/b")}, e.takePending())

	// Metadata only.
	e.one(`{"_operation":"_set_ttl","_id":"$A","_profile_type":"customer","_path":["c"],"_value":{"_v":"","_ttl":"P1D"}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/c")}, e.takePending())

	// Deletes: kind deleted, the paths of the deleted pits.
	e.one(`{"_operation":"_delete","_id":"$B","_profile_type":"customer","_path":["a"],"_value":{"_v":""}}`)
	require.Equal(t, []string{e.profileChange("customer", "$B", "deleted", "_all", "/a")}, e.takePending())
	e.one(`{"_operation":"_delete_with_history","_id":"$A","_profile_type":"customer","_path":["a","b"],"_value":{"_v":""}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "deleted", "_auth", "/a/b")}, e.takePending())

	// A profile link is a row of profile type profile_link; an update through it reaches the target.
	e.one(`{"_operation":"_profile_link","_id":"$C","_path":["x"],"_value":{"_v":"$A"}}`)
	require.Equal(t, []string{e.profileChange("profile_link", "$C", "changed", "_auth", "/new")}, e.takePending())
	e.one(`{"_id":"$C","_profile_type":"customer","_path":["l"],"_value":{"_v":"via link"}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/l")}, e.takePending())

	// A no-op writes nothing.
	e.one(`{"_operation":"_set_if_not_exist","_id":"$A","_profile_type":"customer","_path":["l"],"_value":{"_v":"other"}}`)
	require.Empty(t, e.takePending())

	// A dead letter: channel dead-letters, for admins only, without the message.
	r := e.one(`{"_id":"$A","_path":["x"],"_value":{"_v":null}}`)
	require.Equal(t, "dead_letter", r.Status)
	require.NotNil(t, r.DeadLetterID)
	b, _ := json.Marshal(map[string]any{"id": *r.DeadLetterID, "correlation_id": e.id("$A"), "profile_type": "_d",
		"operation": "_set", "sqlstate": "SPVAL", "reason": "_v can not be null"})
	require.Equal(t, []string{pendingChange{Channel: "dead-letters", Kind: "dead_letter", Payload: string(b), Readers: []string{}}.String()},
		e.takePending())
}

// The reaper marking a grain notified changes only notify_at: that is no change of the profile
// (the reaper's own channel carries it); a TTL deletion is.
func TestChangeTriggersIgnoreNotifyAtAndSeeReaperDeletes(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.batch(gm("_set", "n", `"x"`, in(reapBase), `"_ttn":"PT1S"`),
		gm("_set", "d", `"x"`, in(reapBase), `"_ttl":"PT1S"`, `"_reader":"r1"`))
	e.takePending()
	e.reap(nil)
	var kinds []string
	for _, c := range e.takePending() {
		if strings.HasPrefix(c, "reaper ") {
			kinds = append(kinds, strings.Fields(c)[1])
			continue
		}
		require.Equal(t, e.profileChange("_d", "$A", "deleted", "r1", "/d"), c)
	}
	slices.Sort(kinds)
	require.Equal(t, []string{"ttl", "ttn"}, kinds)
}

// Writes outside the update path (a DBA's UPDATE or DELETE in psql) are recorded by the statement
// triggers. silo.change_triggers off silences those (Silo's writers that record their own); a
// reader that changes is still recorded, for its old reader. silo.change_capture off records no
// profile change at all, whoever writes.
func TestChangeTriggersRecordOtherWriters(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.batch(`{"_id":"$A","_profile_type":"customer","_path":["a"],"_value":{"_v":"1"}}`,
		`{"_id":"$A","_profile_type":"customer","_path":["b"],"_value":{"_v":"1","_reader":"r1"}}`)
	e.takePending()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := e.tx.Exec(e.ctx, sql, args...)
		require.NoError(t, err)
	}

	exec(`UPDATE profile.profilestore SET value = '"2"' WHERE correlation_id = $1 AND path = '/a'`, e.id("$A"))
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/a")}, e.takePending())

	exec(`UPDATE profile.profilestore SET reader = 'r2' WHERE correlation_id = $1 AND path = '/b'`, e.id("$A"))
	require.Equal(t, sorted(
		e.profileChange("customer", "$A", "changed", "r1", "/b"),
		e.profileChange("customer", "$A", "changed", "r2", "/b"),
	), e.takePending())

	exec(`INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, grain_type, inserted)
		VALUES ($1, 'customer', '/c', '_latest', '"3"', 't', 0)`, e.id("$A"))
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/c")}, e.takePending())

	exec(`DELETE FROM profile.profilestore WHERE correlation_id = $1 AND path = '/c'`, e.id("$A"))
	require.Equal(t, []string{e.profileChange("customer", "$A", "deleted", "_auth", "/c")}, e.takePending())

	// Triggers off: the statement triggers stay idle; the old reader still hears of its loss.
	exec(`SET LOCAL silo.change_triggers = off`)
	exec(`UPDATE profile.profilestore SET value = '"4"' WHERE correlation_id = $1 AND path = '/a'`, e.id("$A"))
	require.Empty(t, e.takePending())
	exec(`UPDATE profile.profilestore SET reader = 'r3' WHERE correlation_id = $1 AND path = '/b'`, e.id("$A"))
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "r2", "/b")}, e.takePending())
	// The update path records its own changes meanwhile.
	e.one(`{"_id":"$A","_profile_type":"customer","_path":["a"],"_value":{"_v":"5"}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/a")}, e.takePending())
	exec(`RESET silo.change_triggers`)

	// Capture off: nothing is recorded, by the triggers or by the update path.
	exec(`SET LOCAL silo.change_capture = off`)
	exec(`UPDATE profile.profilestore SET value = '"6"' WHERE correlation_id = $1 AND path = '/a'`, e.id("$A"))
	exec(`UPDATE profile.profilestore SET reader = 'r4' WHERE correlation_id = $1 AND path = '/b'`, e.id("$A"))
	e.batch(`{"_id":"$A","_profile_type":"customer","_path":["a"],"_value":{"_v":"7"}}`,
		`{"_operation":"_set_with_history","_id":"$A","_profile_type":"customer","_path":["h"],"_value":{"_v":"8"}}`,
		`{"_operation":"_delete","_id":"$A","_profile_type":"customer","_path":["b"],"_value":{"_v":""}}`)
	require.Empty(t, e.takePending())
	exec(`RESET silo.change_capture`)
	e.one(`{"_id":"$A","_profile_type":"customer","_path":["a"],"_value":{"_v":"9"}}`)
	require.Equal(t, []string{e.profileChange("customer", "$A", "changed", "_auth", "/a")}, e.takePending())
}

// Pending rows (their payload, and the grains of compact rows) are compressed with lz4 where the
// server has it.
func TestChangePendingPayloadCompression(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	for _, column := range []string{"payload", "grains"} {
		var lz4 bool
		var method string
		require.NoError(t, tx.QueryRow(context.Background(), `
			SELECT EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)),
			       attcompression::text
			FROM pg_attribute WHERE attrelid = 'silo.change_pending'::regclass AND attname = $1`, column).Scan(&lz4, &method))
		if lz4 {
			require.Equal(t, "l", method, column)
		} else {
			require.Equal(t, "", method, column)
		}
	}
}

// addChanges inserts changes into the log directly: channel, kind and readers per row, ids from
// first on.
func addChanges(t *testing.T, tx pgx.Tx, first int64, rows ...[]string) {
	t.Helper()
	for i, r := range rows {
		_, err := tx.Exec(context.Background(), `INSERT INTO silo.changes (id, channel, kind, payload, readers, created)
			VALUES ($1, $2, $3, '{}', $4, now())`, first+int64(i), r[0], r[1], r[2:])
		require.NoError(t, err)
	}
}

func TestChangesSinceFiltersByChannelAndReaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	// Other tests of this package share the database: keep to ids of our own.
	var base int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) + 1000000 FROM silo.changes`).Scan(&base))
	addChanges(t, tx, base+1,
		[]string{"profile:customer:1", "changed", "_auth"},
		[]string{"profile:customer:1", "changed", "vip"},
		[]string{"profile:customer:2", "changed", "_all"},
		[]string{"profile:contract:1", "changed", "_all"},
		[]string{"dead-letters", "dead_letter"},
		[]string{"profile:cust_x:1", "changed", "_all"},
		[]string{"profile:custAx:1", "changed", "_all"},
		[]string{"a*b", "changed", "_all"},
	)
	q := db.New(tx)
	since := func(after int64, channels []string, readers []string, admin bool) []int64 {
		t.Helper()
		rows, err := q.ChangesSince(ctx, db.ChangesSinceParams{After: after, Channels: channels, Readers: readers,
			IsAdmin: admin, MaxChanges: 100})
		require.NoError(t, err)
		ids := []int64{}
		for _, r := range rows {
			ids = append(ids, r.ID-base)
		}
		return ids
	}
	anon, auth, vip := []string{"_all"}, []string{"_all", "_auth"}, []string{"_all", "_auth", "vip"}
	require.Equal(t, []int64{1, 3}, since(base, []string{"profile:customer:*"}, auth, false))
	require.Equal(t, []int64{1, 2, 3}, since(base, []string{"profile:customer:*"}, vip, false))
	require.Equal(t, []int64{3}, since(base, []string{"profile:customer:*"}, anon, false))
	require.Equal(t, []int64{2}, since(base+1, []string{"profile:customer:1"}, vip, false))
	require.Equal(t, []int64{3, 4, 6, 7}, since(base, []string{"profile:*", "dead-letters"}, anon, false))
	require.Equal(t, []int64{8}, since(base, []string{"a*"}, anon, false))
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, since(base, []string{"*"}, nil, true))
	require.Equal(t, []int64{5}, since(base, []string{"dead-letters"}, nil, true))
	require.Equal(t, []int64{}, since(base, []string{"dead-letters"}, vip, false))
	// LIKE's wildcards in a prefix are plain characters.
	require.Equal(t, []int64{6}, since(base, []string{"profile:cust_x:*"}, anon, false))
	require.Equal(t, []int64{}, since(base, []string{}, anon, true))

	for _, bad := range [][]string{{""}, {"a*b"}, {"*a"}, {strings.Repeat("x", 1001)}} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).ChangesSince(ctx, db.ChangesSinceParams{After: 0, Channels: bad, Readers: anon, MaxChanges: 10})
			return err
		})
		requireSQLState(t, err, "SLINV")
	}
	err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ChangesSince(ctx, db.ChangesSinceParams{After: 0, Channels: []string{"x"}, Readers: anon, MaxChanges: 0})
		return err
	})
	requireSQLState(t, err, "SLINV")
	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ChangesAfter(ctx, db.ChangesAfterParams{After: 0, MaxChanges: 10001})
		return err
	})
	requireSQLState(t, err, "SLINV")

	after, err := q.ChangesAfter(ctx, db.ChangesAfterParams{After: base + 6, MaxChanges: 10})
	require.NoError(t, err)
	require.Len(t, after, 2)
	require.Equal(t, "profile:custAx:1", after[0].Channel)
}

// Trimming moves the horizon; resuming from before it is reported (expired), from beyond the log
// too (ahead); api.changes_since refuses to replay across the horizon.
func TestChangeTrimAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t) // commits: the trim and the sequence must not be seen by other tests
	q := db.New(pool)
	_, err := pool.Exec(ctx, `SELECT api.profile_apply_batch($1)`, `[
		{"_id":"t1","_path":["a"],"_value":{"_v":"1"}}, {"_id":"t2","_path":["a"],"_value":{"_v":"1"}},
		{"_id":"t3","_path":["a"],"_value":{"_v":"1"}}, {"_id":"t4","_path":["a"],"_value":{"_v":"1"}}]`)
	require.NoError(t, err)
	last, err := q.ChangeSequence(ctx, true)
	require.NoError(t, err)
	require.Equal(t, int64(4), last)
	st, err := q.ChangeStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, db.ChangeStatusRow{LastID: 4, OldestID: 1, TrimmedThrough: 0, Pending: 0, Retention: "24 hours"}, st)

	resume := func(after int64) db.ChangeResumeRow {
		r, err := q.ChangeResume(ctx, after)
		require.NoError(t, err)
		return r
	}
	require.Equal(t, db.ChangeResumeRow{Status: "ok", ResumeAfter: 0, TrimmedThrough: 0, LastID: 4}, resume(0))
	require.Equal(t, db.ChangeResumeRow{Status: "ahead", ResumeAfter: 4, TrimmedThrough: 0, LastID: 4}, resume(5))

	// Nothing is old enough; then the first two are.
	n, err := q.ChangeTrim(ctx, pgtype.Interval{})
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = pool.Exec(ctx, `UPDATE silo.changes SET sequenced = now() - interval '2 hours' WHERE id <= 2`)
	require.NoError(t, err)
	// A pending change nobody sequenced, older than the retention.
	_, err = pool.Exec(ctx, `INSERT INTO silo.change_pending (channel, kind, created) VALUES ('x', 'y', now() - interval '2 hours')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = '1 hour' WHERE key = 'change_retention'`)
	require.NoError(t, err)
	n, err = q.ChangeTrim(ctx, pgtype.Interval{})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)

	st, err = q.ChangeStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, db.ChangeStatusRow{LastID: 4, OldestID: 3, TrimmedThrough: 2, Pending: 0, Retention: "1 hour"}, st)
	require.Equal(t, db.ChangeResumeRow{Status: "expired", ResumeAfter: 2, TrimmedThrough: 2, LastID: 4}, resume(1))
	require.Equal(t, db.ChangeResumeRow{Status: "ok", ResumeAfter: 2, TrimmedThrough: 2, LastID: 4}, resume(2))

	_, err = q.ChangesSince(ctx, db.ChangesSinceParams{After: 1, Channels: []string{"profile:*"}, IsAdmin: true, MaxChanges: 10})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "SCEXP", pgErr.Code)
	rows, err := q.ChangesSince(ctx, db.ChangesSinceParams{After: 2, Channels: []string{"profile:*"}, IsAdmin: true, MaxChanges: 10})
	require.NoError(t, err)
	require.Len(t, rows, 2)

	// Everything trimmed: the log still knows where it ends.
	n, err = q.ChangeTrim(ctx, pgtype.Interval{Valid: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	st, err = q.ChangeStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, db.ChangeStatusRow{LastID: 4, OldestID: 0, TrimmedThrough: 4, Pending: 0, Retention: "1 hour"}, st)

	for _, bad := range []string{"'-1 hour'", "'soon'"} {
		_, err = pool.Exec(ctx, `UPDATE silo.settings SET value = `+bad+` WHERE key = 'change_retention'`)
		require.NoError(t, err)
		_, err = q.ChangeTrim(ctx, pgtype.Interval{})
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "SLINV", pgErr.Code)
	}
}

// Ids follow commit order, not the order in which transactions wrote: a transaction that wrote
// first and commits last gets the higher id. The sequencer announces the highest id on
// silo_changes; writers announce on silo_change_pending once per transaction.
func TestChangeSequenceFollowsCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	q := db.New(pool)

	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN silo_change_pending`)
	require.NoError(t, err)
	_, err = listener.Exec(ctx, `LISTEN silo_changes`)
	require.NoError(t, err)
	next := func() (string, string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Channel, n.Payload
	}

	write := func(tx pgx.Tx, id string) {
		t.Helper()
		_, err := tx.Exec(ctx, `SELECT api.profile_apply_batch($1)`,
			fmt.Sprintf(`[{"_id":%q,"_path":["a"],"_value":{"_v":"1"}},{"_id":%q,"_path":["b"],"_value":{"_v":"1","_reader":"r"}}]`, id, id))
		require.NoError(t, err)
	}
	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer first.Rollback(ctx)
	write(first, "first")
	second, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer second.Rollback(ctx)
	write(second, "second")

	// Nothing committed: nothing to number.
	last, err := q.ChangeSequence(ctx, true)
	require.NoError(t, err)
	require.Zero(t, last)

	require.NoError(t, second.Commit(ctx))
	ch, payload := next()
	require.Equal(t, "silo_change_pending", ch)
	require.Equal(t, "", payload)
	last, err = q.ChangeSequence(ctx, true)
	require.NoError(t, err)
	require.Equal(t, int64(2), last)
	ch, payload = next()
	require.Equal(t, []string{"silo_changes", "2"}, []string{ch, payload})

	require.NoError(t, first.Commit(ctx))
	ch, _ = next()
	require.Equal(t, "silo_change_pending", ch)
	last, err = q.ChangeSequence(ctx, true)
	require.NoError(t, err)
	require.Equal(t, int64(4), last)
	ch, payload = next()
	require.Equal(t, []string{"silo_changes", "4"}, []string{ch, payload})

	rows, err := pool.Query(ctx, `SELECT id::text || ' ' || channel || ' ' || array_to_string(readers, ',')
		FROM silo.changes ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		"1 profile:_d:second _auth", "2 profile:_d:second r",
		"3 profile:_d:first _auth", "4 profile:_d:first r",
	}, got)

	// A writer with silo.change_notify off does not notify.
	quiet, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer quiet.Rollback(ctx)
	_, err = quiet.Exec(ctx, `SET LOCAL silo.change_notify = off`)
	require.NoError(t, err)
	write(quiet, "quiet")
	require.NoError(t, quiet.Commit(ctx))
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = listener.Conn().WaitForNotification(wctx)
	require.Error(t, err, "a writer notified with silo.change_notify off")
	_, err = pool.Exec(ctx, `DELETE FROM silo.change_pending`)
	require.NoError(t, err)

	// Nothing pending: the highest id, no notification.
	last, err = q.ChangeSequence(ctx, true)
	require.NoError(t, err)
	require.Equal(t, int64(4), last)
	wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = listener.Conn().WaitForNotification(wctx)
	require.Error(t, err)

	// As Silo processes sequence: no notification in the run, a separate announcement.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	write(tx, "third")
	require.NoError(t, tx.Commit(ctx))
	ch, _ = next()
	require.Equal(t, "silo_change_pending", ch)
	last, err = q.ChangeSequence(ctx, false)
	require.NoError(t, err)
	require.Equal(t, int64(6), last)
	wctx2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	_, err = listener.Conn().WaitForNotification(wctx2)
	require.Error(t, err, "change_sequence(false) notified")
	require.NoError(t, q.ChangeAnnounce(ctx, last))
	ch, payload = next()
	require.Equal(t, []string{"silo_changes", "6"}, []string{ch, payload})
}

// The rule of channel names is one: what api.change_publish accepts as a channel is exactly what
// api.change_channels_check accepts as a pattern without *, and api.changes_since refuses what
// api.change_channels_check calls invalid.
func TestChangeChannelRuleIsOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	check := func(tx pgx.Tx, patterns []string, admin bool) map[string]string {
		t.Helper()
		rows, err := tx.Query(ctx, `SELECT channel, sqlstate FROM api.change_channels_check($1, $2)`, patterns, admin)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var c, code string
			require.NoError(t, rows.Scan(&c, &code))
			out[c] = code
		}
		require.NoError(t, rows.Err())
		return out
	}
	for _, tc := range []struct {
		name  string
		valid bool
	}{
		{"profile:customer:0815", true},
		{"profile:profile_link:x", true},
		{"profile:Customer:a b:c", true}, // the name after the namespace is anything without *
		{"ops:deploy", true},
		{"reports:daily", true},
		{"a-b_c9:x", true},
		{"dead-letters", true},
		{"reaper", true},
		{"bogus", false},
		{"", false},
		{"profile", false},
		{"profile:", false},
		{"Profile:x", false},
		{"9ops:x", false},
		{":x", false},
		{"-x:y", false},
		{"dead-letters:x", false}, // a name of its own is no namespace
		{"reaper:x", false},
		{"profile:a*b", false},
		{"ops:" + strings.Repeat("x", 996), true},
		{"ops:" + strings.Repeat("x", 997), false},
	} {
		t.Run(tc.name[:min(len(tc.name), 30)], func(t *testing.T) {
			err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `SELECT api.change_publish($1, 'k')`, tc.name)
				return err
			})
			refused := check(tx, []string{tc.name}, true)
			if tc.valid {
				require.NoError(t, err)
				require.Empty(t, refused)
			} else {
				requireSQLState(t, err, "SLINV")
				require.Equal(t, map[string]string{tc.name: "SLINV"}, refused)
			}
			err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
				_, err := db.New(tx).ChangesSince(ctx, db.ChangesSinceParams{After: 1 << 60, Channels: []string{tc.name}, IsAdmin: true, MaxChanges: 1})
				return err
			})
			if tc.valid {
				require.NoError(t, err)
			} else {
				requireSQLState(t, err, "SLINV")
			}
		})
	}
	// Patterns: a * alone or at the end of the beginning of some channel.
	patterns := map[string]bool{
		"*": true, "profile:*": true, "profile:customer:*": true, "p*": true, "ops:*": true, "dead-*": true,
		"dead-letters*": true, "rea*": true, "ops:de*": true,
		"a*b": false, "**": false, "*a": false, "Bogus*": false, ":x*": false, "dead-letters:*": false, "-*": false,
	}
	var all []string
	for p := range patterns {
		all = append(all, p)
	}
	refused := check(tx, all, true)
	for p, ok := range patterns {
		if ok {
			require.NotContains(t, refused, p)
		} else {
			require.Equal(t, "SLINV", refused[p], p)
		}
	}
	// One row per refused pattern, in the order given, with a message naming it and the rule as hint.
	rows, err := tx.Query(ctx, `SELECT channel, sqlstate, message, coalesce(hint, '') FROM api.change_channels_check('{x:ok,bogus,dead-letters,a*b}', false)`)
	require.NoError(t, err)
	type refusal struct{ Channel, SQLState, Message, Hint string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[refusal])
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, []string{"bogus", "dead-letters", "a*b"}, []string{got[0].Channel, got[1].Channel, got[2].Channel})
	require.Equal(t, []string{"SLINV", "SLFRB", "SLINV"}, []string{got[0].SQLState, got[1].SQLState, got[2].SQLState})
	require.Contains(t, got[0].Message, "bogus")
	require.Contains(t, got[0].Hint, "dead-letters, purge, reaper or {namespace}:{name}")
	require.Contains(t, got[1].Message, "dead-letters is for admins only")
	require.Empty(t, got[1].Hint)
	require.Empty(t, check(tx, []string{"dead-letters"}, true), "an admin may read dead-letters")
}

// A channel for admins only is one whose changes never have readers: the dead letters' trigger
// publishes them so, and api.change_publish refuses readers for them.
func TestChangeAdminOnlyChannels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	var adminOnly []string
	rows, err := tx.Query(ctx, `SELECT channel FROM change_private.named_channels() WHERE admin_only ORDER BY 1`)
	require.NoError(t, err)
	adminOnly, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"belts", "dead-letters", "purge"}, adminOnly)

	_, err = tx.Exec(ctx, `DELETE FROM silo.change_pending`)
	require.NoError(t, err)
	_, err = db.New(tx).ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(`[{"_id":"admin-only","_path":["x"],"_value":{"_v":null}}]`)})
	require.NoError(t, err)
	var n, withReaders int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE cardinality(readers) > 0)
		FROM api.changes_pending() WHERE channel = ANY ($1)`, adminOnly).Scan(&n, &withReaders))
	require.Equal(t, 1, n)
	require.Zero(t, withReaders)

	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT api.change_publish('dead-letters', 'dead_letter', '{}', '{_all}')`)
		return err
	})
	requireSQLState(t, err, "SLINV")
	_, err = tx.Exec(ctx, `SELECT api.change_publish('dead-letters', 'dead_letter')`)
	require.NoError(t, err)
}
