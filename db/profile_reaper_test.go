package db_test

// Tests of the reaper (sql/profile/10_reaper.sql): TTL deletion in batches, one TTN notification
// per TTN value, the reaper events and their change notifications, settings, trimming, and
// concurrent runs. Grains are made due by an _in in the past and a short _ttl/_ttn.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// reapBase is 2020-01-01T00:00:00Z in epoch milliseconds: grains inserted then with a short ttl or
// ttn are due.
const reapBase int64 = 1577836800000

// gm is an update of $A's grain at path (one segment) with _v and further _value fields.
func gm(op, path, v string, meta ...string) string {
	value := `{"_v":` + v
	for _, x := range meta {
		value += "," + x
	}
	return `{"_operation":"` + op + `","_id":"$A","_path":["` + path + `"],"_value":` + value + `}}`
}

func in(ms int64) string { return fmt.Sprintf(`"_in":%d`, ms) }

// reapEvent is a reaper event without its id and creation time.
type reapEvent struct {
	Kind, Path, Pit, GrainType string
	Inserted                   int64
	TTL, TTN, Reader, Origin   string
	Certainty                  float32
	Due                        string
}

// reapEvents lists the reaper events of $A, oldest first, with their ids.
func (e *applyEnv) reapEvents() ([]reapEvent, []int64) {
	e.t.Helper()
	evs, err := e.q.ProfileReaperEvents(e.ctx, db.ProfileReaperEventsParams{After: 0, MaxEvents: 10000})
	require.NoError(e.t, err)
	var out []reapEvent
	var ids []int64
	for _, ev := range evs {
		if ev.CorrelationID != e.id("$A") {
			continue
		}
		require.Equal(e.t, "_d", ev.ProfileType)
		origin := ""
		if ev.Origin != nil {
			origin = *ev.Origin
		}
		out = append(out, reapEvent{Kind: ev.Kind, Path: ev.Path, Pit: ev.Pit, GrainType: ev.GrainType,
			Inserted: ev.Inserted, TTL: ev.TTL, TTN: ev.TTN, Reader: ev.Reader, Origin: origin,
			Certainty: ev.Certainty, Due: ev.Due.UTC().Format("2006-01-02T15:04:05.000Z")})
		ids = append(ids, ev.ID)
	}
	return out, ids
}

// reapChange is a row of silo.change_pending on channel reaper.
type reapChange struct {
	Kind    string
	Payload string
	Readers []string
}

// reapChanges lists the pending changes on channel reaper about $A, in insert order.
func (e *applyEnv) reapChanges() []reapChange {
	e.t.Helper()
	rows, err := e.tx.Query(e.ctx, `
		SELECT kind, payload::text, readers FROM silo.change_pending
		WHERE channel = 'reaper' AND payload->>'correlationId' = $1 ORDER BY pending_id`, e.id("$A"))
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (reapChange, error) {
		var c reapChange
		err := row.Scan(&c.Kind, &c.Payload, &c.Readers)
		return c, err
	})
	require.NoError(e.t, err)
	return out
}

// payload is the change payload expected for a reaper event.
func (e *applyEnv) payload(id int64, ev reapEvent) string {
	m := map[string]any{"id": id, "correlationId": e.id("$A"), "profileType": "_d", "path": ev.Path, "pit": ev.Pit,
		"grain_type": ev.GrainType, "inserted": ev.Inserted, "ttl": ev.TTL, "ttn": ev.TTN, "reader": ev.Reader,
		"origin": nil, "certainty": ev.Certainty, "due": ev.Due}
	if ev.Origin != "" {
		m["origin"] = ev.Origin
	}
	b, err := json.Marshal(m)
	require.NoError(e.t, err)
	return string(b)
}

// requireChanges checks that the changes on channel reaper are exactly the events, in order.
func (e *applyEnv) requireChanges(evs []reapEvent, ids []int64) {
	e.t.Helper()
	changes := e.reapChanges()
	require.Len(e.t, changes, len(evs))
	for i, c := range changes {
		require.Equal(e.t, evs[i].Kind, c.Kind)
		require.Equal(e.t, []string{evs[i].Reader}, c.Readers)
		require.JSONEq(e.t, e.payload(ids[i], evs[i]), c.Payload)
		require.NotContains(e.t, c.Payload, `"_v"`)
		require.NotContains(e.t, c.Payload, `"value"`)
	}
}

func (e *applyEnv) reap(batch *int32) db.ProfileReapRow {
	e.t.Helper()
	r, err := e.q.ProfileReap(e.ctx, batch)
	require.NoError(e.t, err)
	return r
}

func reapRow(ttl, ttn int64, more bool) db.ProfileReapRow {
	return db.ProfileReapRow{TTLDeleted: ttl, TTNNotified: ttn, More: more}
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

func TestProfileReapTTLDeletesExpiredGrainsInBatches(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	ok := e.batch(
		gm("_set", "e1", `"a"`, in(reapBase), `"_ttl":"PT1S"`),
		gm("_set", "e2", `["a","b"]`, in(reapBase+1000), `"_ttl":"PT1S"`),
		gm("_set_with_history", "h", `"old"`, in(reapBase+2000), `"_ttl":"PT1S"`),
		gm("_set_with_history", "h", `"new"`, `"_ttl":"P1D"`),
		gm("_set", "e3", `"a"`, in(reapBase+3000), `"_ttl":"PT1S"`),
		gm("_set", "e4", `"a"`, in(reapBase+4000), `"_ttl":"PT1S"`, `"_c":0.5`, `"_reader":"analysts"`,
			`"_origin":"/belts/9"`),
		gm("_set", "keep1", `"a"`, in(reapBase)),
		gm("_set", "keep2", `"a"`, `"_ttl":"P1D"`),
		gm("_set", "keep3", `"a"`, in(reapBase), `"_ttl":"P200Y"`),
	)
	for _, r := range ok {
		require.Equal(t, "ok", r.Status, "%+v", r)
	}

	// Five due, oldest first, two per batch; the history pit of /h by its own expiry.
	two := int32(2)
	require.Equal(t, reapRow(2, 0, true), e.reap(&two))
	require.Equal(t, reapRow(2, 0, true), e.reap(&two))
	require.Equal(t, reapRow(1, 0, false), e.reap(&two))
	require.Equal(t, reapRow(0, 0, false), e.reap(&two))

	var left []string
	for _, g := range e.grains("$A") {
		left = append(left, g.Path+" "+g.Pit)
	}
	require.Equal(t, []string{"/h _latest", "/keep1 _latest", "/keep2 _latest", "/keep3 _latest"}, left)

	iso := func(at int64) string { return isoMs(at) }
	ev := func(path, pit, gt string, inserted int64) reapEvent {
		return reapEvent{Kind: "ttl", Path: path, Pit: pit, GrainType: gt, Inserted: inserted, TTL: "PT1S",
			TTN: "P100Y", Reader: "_auth", Certainty: 1, Due: iso(inserted + 1000)}
	}
	e4 := ev("/e4", "_latest", "t", reapBase+4000)
	e4.Reader, e4.Origin, e4.Certainty = "analysts", "/belts/9", 0.5
	want := []reapEvent{
		ev("/e1", "_latest", "t", reapBase),
		ev("/e2", "_latest", "a", reapBase+1000),
		ev("/h", pitOf(reapBase+2000), "t", reapBase+2000),
		ev("/e3", "_latest", "t", reapBase+3000),
		e4,
	}
	evs, ids := e.reapEvents()
	require.Equal(t, want, evs)
	e.requireChanges(evs, ids)
}

func TestProfileReapTTNNotifiesOncePerValue(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.batch(
		gm("_set", "n", `"x"`, in(reapBase), `"_ttn":"PT1M"`, `"_c":0.5`, `"_reader":"analysts"`, `"_origin":"/belts/1"`),
		gm("_set", "later", `"x"`, `"_ttn":"P1D"`),
	)
	nEvent := func(inserted int64, ttn string, due int64) reapEvent {
		return reapEvent{Kind: "ttn", Path: "/n", Pit: "_latest", GrainType: "t", Inserted: inserted, TTL: "P100Y",
			TTN: ttn, Reader: "analysts", Origin: "/belts/1", Certainty: 0.5, Due: isoMs(due)}
	}
	var want []reapEvent

	require.Equal(t, reapRow(0, 1, false), e.reap(nil))
	want = append(want, nEvent(reapBase, "PT1M", reapBase+ms(time.Minute)))
	// The grain stays, with its value; it is not due any more.
	grains := e.grains("$A")
	require.Len(t, grains, 2)
	require.Equal(t, gr("/n", `"x"`, reapBase, ttn("PT1M", ""), cert(0.5), reader("analysts"), origin("/belts/1")), grains[1])

	// A second run does not notify again.
	require.Equal(t, reapRow(0, 0, false), e.reap(nil))
	evs, _ := e.reapEvents()
	require.Equal(t, want, evs)

	// A rewrite with a new _in is a new notification.
	e.one(gm("_set", "n", `"x"`, in(reapBase+100000), `"_ttn":"PT1M"`, `"_c":0.5`, `"_reader":"analysts"`, `"_origin":"/belts/1"`))
	require.Equal(t, reapRow(0, 1, false), e.reap(nil))
	want = append(want, nEvent(reapBase+100000, "PT1M", reapBase+100000+ms(time.Minute)))
	require.Equal(t, reapRow(0, 0, false), e.reap(nil))

	// So is a new ttn.
	require.Equal(t, "ok", e.one(`{"_operation":"_set_ttn","_id":"$A","_path":["n"],"_value":{"_v":"PT2M"}}`).Status)
	require.Equal(t, reapRow(0, 1, false), e.reap(nil))
	want = append(want, nEvent(reapBase+100000, "PT2M", reapBase+100000+ms(2*time.Minute)))
	require.Equal(t, reapRow(0, 0, false), e.reap(nil))

	// Archiving the notified _latest into history does not notify it again; the new _latest is due.
	e.one(gm("_set_with_history", "n", `"y"`, in(reapBase+200000), `"_ttn":"PT1M"`, `"_c":0.5`, `"_reader":"analysts"`, `"_origin":"/belts/1"`))
	require.Equal(t, reapRow(0, 1, false), e.reap(nil))
	want = append(want, nEvent(reapBase+200000, "PT1M", reapBase+200000+ms(time.Minute)))
	require.Equal(t, reapRow(0, 0, false), e.reap(nil))

	evs, ids := e.reapEvents()
	require.Equal(t, want, evs)
	e.requireChanges(evs, ids)
	require.Len(t, e.grains("$A"), 3) // /later, /n history, /n _latest
}

func TestProfileReapNotifiesThenDeletesAGrainDueForBoth(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.one(gm("_set", "b", `"x"`, in(reapBase), `"_ttl":"PT2S"`, `"_ttn":"PT1S"`))
	require.Equal(t, reapRow(1, 1, false), e.reap(nil))
	require.Empty(t, e.grains("$A"))
	base := reapEvent{Path: "/b", Pit: "_latest", GrainType: "t", Inserted: reapBase, TTL: "PT2S", TTN: "PT1S",
		Reader: "_auth", Certainty: 1}
	ttnEv, ttlEv := base, base
	ttnEv.Kind, ttnEv.Due = "ttn", isoMs(reapBase+1000)
	ttlEv.Kind, ttlEv.Due = "ttl", isoMs(reapBase+2000)
	evs, ids := e.reapEvents()
	require.Equal(t, []reapEvent{ttnEv, ttlEv}, evs)
	e.requireChanges(evs, ids)
}

// A grain due for both whose notification does not fit in the batch is not deleted before it is
// notified: the deletion waits for a later batch.
func TestProfileReapDeletesOnlyAfterTheDueNotification(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.batch(
		gm("_set", "y", `"x"`, in(reapBase), `"_ttn":"PT1S"`),
		gm("_set", "x", `"x"`, in(reapBase), `"_ttn":"PT2S"`, `"_ttl":"PT3S"`),
	)
	one := int32(1)
	require.Equal(t, reapRow(0, 1, true), e.reap(&one)) // /y notified; /x expired but waits
	require.Len(t, e.grains("$A"), 2)
	require.Equal(t, reapRow(1, 1, true), e.reap(&one)) // /x notified, then deleted
	require.Equal(t, reapRow(0, 0, false), e.reap(&one))
	grains := e.grains("$A")
	require.Len(t, grains, 1)
	require.Equal(t, "/y", grains[0].Path)

	ev := func(kind, path, ttl, ttn string, due int64) reapEvent {
		return reapEvent{Kind: kind, Path: path, Pit: "_latest", GrainType: "t", Inserted: reapBase, TTL: ttl,
			TTN: ttn, Reader: "_auth", Certainty: 1, Due: isoMs(due)}
	}
	evs, ids := e.reapEvents()
	require.Equal(t, []reapEvent{
		ev("ttn", "/y", "P100Y", "PT1S", reapBase+1000),
		ev("ttn", "/x", "PT3S", "PT2S", reapBase+2000),
		ev("ttl", "/x", "PT3S", "PT2S", reapBase+3000),
	}, evs)
	e.requireChanges(evs, ids)
}

func TestProfileReapSettingsAndValidation(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.batch(
		gm("_set", "a", `"x"`, in(reapBase), `"_ttl":"PT1S"`),
		gm("_set", "b", `"x"`, in(reapBase+1), `"_ttl":"PT1S"`),
	)
	zero := int32(0)
	err := dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error { _, err := db.New(tx).ProfileReap(e.ctx, &zero); return err })
	requireSQLState(t, err, "SLINV")

	_, err = e.tx.Exec(e.ctx, `UPDATE silo.settings SET value = 'many' WHERE key = 'reaper.batch_size'`)
	require.NoError(t, err)
	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error { _, err := db.New(tx).ProfileReap(e.ctx, nil); return err })
	requireSQLState(t, err, "SLINV")

	// Without an argument, the batch size is the setting.
	_, err = e.tx.Exec(e.ctx, `UPDATE silo.settings SET value = '1' WHERE key = 'reaper.batch_size'`)
	require.NoError(t, err)
	require.Equal(t, reapRow(1, 0, true), e.reap(nil))
	require.Equal(t, reapRow(1, 0, true), e.reap(nil))
	require.Equal(t, reapRow(0, 0, false), e.reap(nil))

	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ProfileReaperEvents(e.ctx, db.ProfileReaperEventsParams{After: 0, MaxEvents: 0})
		return err
	})
	requireSQLState(t, err, "SLINV")
	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ProfileReaperEventTrim(e.ctx, pgtype.Interval{Days: -1, Valid: true})
		return err
	})
	requireSQLState(t, err, "SLINV")
	_, err = e.tx.Exec(e.ctx, `UPDATE silo.settings SET value = 'forever' WHERE key = 'reaper.event_retention'`)
	require.NoError(t, err)
	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ProfileReaperEventTrim(e.ctx, pgtype.Interval{})
		return err
	})
	requireSQLState(t, err, "SLINV")
}

func TestProfileReaperEventsTrimAndRead(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	_, err := e.tx.Exec(e.ctx, `
		INSERT INTO profile.reaper_events (kind, correlation_id, profile_type, path, pit, grain_type, inserted,
		                                   ttl, ttn, reader, certainty, due, created)
		SELECT 'ttl', $1, '_d', '/g' || n, '_latest', 't', 0, 'PT1S', 'P100Y', r, 1, now(), now() - d
		FROM (VALUES (1, '_auth', interval '8 days'), (2, 'analysts', interval '6 days'),
		             (3, '_all', interval '1 day'), (4, 'analysts', interval '0')) AS v(n, r, d)`, e.id("$A"))
	require.NoError(t, err)

	paths := func(after int64, limit int32, readers []string) ([]string, []int64) {
		evs, err := e.q.ProfileReaperEvents(e.ctx, db.ProfileReaperEventsParams{After: after, MaxEvents: limit, Readers: readers})
		require.NoError(t, err)
		var ps []string
		var ids []int64
		for _, ev := range evs {
			if ev.CorrelationID == e.id("$A") {
				ps, ids = append(ps, ev.Path), append(ids, ev.ID)
			}
		}
		return ps, ids
	}
	all, ids := paths(0, 100, nil)
	require.Equal(t, []string{"/g1", "/g2", "/g3", "/g4"}, all)
	got, _ := paths(ids[0], 2, nil)
	require.Equal(t, []string{"/g2", "/g3"}, got)
	got, _ = paths(0, 100, []string{"_all", "analysts"})
	require.Equal(t, []string{"/g2", "/g3", "/g4"}, got)

	// The retention setting (7 days), then an explicit one.
	n, err := e.q.ProfileReaperEventTrim(e.ctx, pgtype.Interval{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	got, _ = paths(0, 100, nil)
	require.Equal(t, []string{"/g2", "/g3", "/g4"}, got)
	n, err = e.q.ProfileReaperEventTrim(e.ctx, pgtype.Interval{Microseconds: time.Hour.Microseconds(), Valid: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	got, _ = paths(0, 100, nil)
	require.Equal(t, []string{"/g4"}, got)
}

// Two runs at once (each batch committed) share the due grains: every grain is deleted or notified
// exactly once, and the events and changes match one to one.
func TestProfileReapConcurrentRunsNeverDoubleReap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	const n = 30
	var msgs []string
	for i := range n {
		msgs = append(msgs,
			fmt.Sprintf(`{"_id":"c","_path":["ttl%d"],"_value":{"_v":"x","_in":%d,"_ttl":"PT1S"}}`, i, reapBase+int64(i)),
			fmt.Sprintf(`{"_id":"c","_path":["ttn%d"],"_value":{"_v":"x","_in":%d,"_ttn":"PT1S"}}`, i, reapBase+int64(i)))
	}
	b, _ := json.Marshal(msgs)
	_, err := pool.Exec(ctx, `SELECT api.profile_apply_batch((SELECT jsonb_agg(m::jsonb) FROM jsonb_array_elements_text($1::jsonb) m))`, string(b))
	require.NoError(t, err)

	var mu sync.Mutex
	var ttl, ttn int64
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := db.New(pool)
			size := int32(3)
			for {
				r, err := q.ProfileReap(ctx, &size)
				if err != nil {
					errs[w] = err
					return
				}
				mu.Lock()
				ttl, ttn = ttl+r.TTLDeleted, ttn+r.TTNNotified
				mu.Unlock()
				if !r.More {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.EqualValues(t, n, ttl)
	require.EqualValues(t, n, ttn)
	r, err := db.New(pool).ProfileReap(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, reapRow(0, 0, false), r)

	var events, distinct, changes, matched int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM profile.reaper_events),
		       (SELECT count(DISTINCT (kind, path)) FROM profile.reaper_events),
		       (SELECT count(*) FROM silo.change_pending WHERE channel = 'reaper'),
		       (SELECT count(*) FROM silo.change_pending c JOIN profile.reaper_events e
		          ON (c.payload->>'id')::bigint = e.id AND c.kind = e.kind AND c.payload->>'path' = e.path
		        WHERE c.channel = 'reaper')`).Scan(&events, &distinct, &changes, &matched))
	require.Equal(t, []int{2 * n, 2 * n, 2 * n, 2 * n}, []int{events, distinct, changes, matched})
	var left, notified int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*), count(*) FILTER (WHERE ttn = 'PT1S' AND notify_at IS NULL) FROM profile.profilestore`).Scan(&left, &notified))
	require.Equal(t, []int{n, n}, []int{left, notified})
}

// CALL api.profile_reap_all runs batches, each committed, until nothing is due.
func TestProfileReapAllProcedure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `SELECT api.profile_apply_batch($1::jsonb)`, fmt.Sprintf(`[
		{"_id":"p","_path":["a"],"_value":{"_v":"x","_in":%[1]d,"_ttl":"PT1S"}},
		{"_id":"p","_path":["b"],"_value":{"_v":"x","_in":%[1]d,"_ttl":"PT1S"}},
		{"_id":"p","_path":["c"],"_value":{"_v":"x","_in":%[1]d,"_ttl":"PT1S"}},
		{"_id":"p","_path":["d"],"_value":{"_v":"x","_in":%[1]d,"_ttn":"PT1S"}},
		{"_id":"p","_path":["e"],"_value":{"_v":"x"}}]`, reapBase))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO profile.reaper_events (kind, correlation_id, profile_type, path, pit, grain_type, inserted,
		                                   ttl, ttn, reader, certainty, due, created)
		VALUES ('ttl', 'old', '_d', '/x', '_latest', 't', 0, 'PT1S', 'P100Y', '_auth', 1, now(), now() - interval '30 days')`)
	require.NoError(t, err)
	var ttl, ttn, trimmed int64
	require.NoError(t, pool.QueryRow(ctx, `CALL api.profile_reap_all(1, '1 minute', NULL, NULL, NULL)`).Scan(&ttl, &ttn, &trimmed))
	require.Equal(t, []int64{3, 1, 1}, []int64{ttl, ttn, trimmed})
	var paths []string
	rows, err := pool.Query(ctx, `SELECT path FROM profile.profilestore ORDER BY path`)
	require.NoError(t, err)
	paths, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"/d", "/e"}, paths)
	var events int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM profile.reaper_events`).Scan(&events))
	require.Equal(t, 4, events)
}
