package db_test

// Tests of the profile store's write path (sql/profile/01_types.sql to 08_dead_letter.sql): every
// operation, every dead letter rule, batch semantics, profile links, history pits, replays, and batch-versus-one-by-one
// equivalence. Messages name profiles $A, $B, $C: each test replaces them with correlation ids of
// its own, since tests run in parallel, each in its own transaction.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// applyEnv is one test's transaction and the names of its profiles.
type applyEnv struct {
	t   *testing.T
	ctx context.Context
	tx  pgx.Tx
	q   *db.Queries
	ids *strings.Replacer
}

func newApplyEnv(t *testing.T) *applyEnv {
	t.Helper()
	tx := dbtest.Tx(t)
	return newApplyEnvTx(t, tx)
}

func newApplyEnvTx(t *testing.T, tx pgx.Tx) *applyEnv {
	prefix := strings.ReplaceAll(t.Name(), `"`, "")
	return &applyEnv{
		t: t, ctx: context.Background(), tx: tx, q: db.New(tx),
		ids: strings.NewReplacer("$A", prefix+"~A", "$B", prefix+"~B", "$C", prefix+"~C", "$D", prefix+"~D"),
	}
}

// id is the correlation id a test's $A, $B, ... stands for.
func (e *applyEnv) id(name string) string { return e.ids.Replace(name) }

// batch applies messages (JSON objects or anything else) as one batch.
func (e *applyEnv) batch(msgs ...string) []db.ProfileApplyBatchRow {
	e.t.Helper()
	res, err := e.q.ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(e.ids.Replace("[" + strings.Join(msgs, ",") + "]"))})
	require.NoError(e.t, err)
	require.Len(e.t, res, len(msgs))
	return res
}

// one applies one message and returns its result.
func (e *applyEnv) one(msg string) db.ProfileApplyBatchRow {
	e.t.Helper()
	return e.batch(msg)[0]
}

// grainRow is one row of profile.profilestore, times as text (UTC, milliseconds), "" for NULL.
type grainRow struct {
	Type    string
	Path    string
	Pit     string
	Value   string // jsonb text
	C       float32
	GT      string
	In      int64
	TTL     string
	Reader  string
	Origin  string
	TTN     string
	Expires string
	Notify  string
}

type rowOpt func(*grainRow)

// gr is a _latest row at path with default metadata; the grain type follows the value's shape.
func gr(path, value string, in int64, opts ...rowOpt) grainRow {
	r := grainRow{Type: "_d", Path: path, Pit: "_latest", Value: value, C: 1, GT: "t", In: in, TTL: "P100Y",
		Reader: "_auth", TTN: "P100Y"}
	switch {
	case strings.HasPrefix(value, "["):
		r.GT = "a"
	case strings.HasPrefix(value, "{"):
		r.GT = "c"
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func hist() rowOpt                 { return func(r *grainRow) { r.Pit = pitOf(r.In) } }
func atPit(p string) rowOpt        { return func(r *grainRow) { r.Pit = p } }
func ptype(t string) rowOpt        { return func(r *grainRow) { r.Type = t } }
func cert(c float32) rowOpt        { return func(r *grainRow) { r.C = c } }
func origin(o string) rowOpt       { return func(r *grainRow) { r.Origin = o } }
func reader(s string) rowOpt       { return func(r *grainRow) { r.Reader = s } }
func ttl(d, expires string) rowOpt { return func(r *grainRow) { r.TTL, r.Expires = d, expires } }
func ttn(d, notify string) rowOpt  { return func(r *grainRow) { r.TTN, r.Notify = d, notify } }
func pitOf(ms int64) string        { return "_" + time.UnixMilli(ms).UTC().Format("20060102T150405.000Z") }
func isoMs(ms int64) string        { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }
func withIDs(e *applyEnv) rowOpt   { return func(r *grainRow) { r.Value = e.ids.Replace(r.Value) } }

// grains lists every row of a profile, by profile type, path and pit (history before _latest).
func (e *applyEnv) grains(name string) []grainRow {
	e.t.Helper()
	rows, err := e.tx.Query(e.ctx, `
		SELECT profile_type, path, pit, value::text, certainty, grain_type, inserted, ttl, reader,
		       coalesce(origin, ''), ttn,
		       coalesce(to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), ''),
		       coalesce(to_char(notify_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), '')
		FROM profile.profilestore WHERE correlation_id = $1
		ORDER BY profile_type COLLATE "C", path COLLATE "C", pit COLLATE "C"`, e.id(name))
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (grainRow, error) {
		var r grainRow
		err := row.Scan(&r.Type, &r.Path, &r.Pit, &r.Value, &r.C, &r.GT, &r.In, &r.TTL, &r.Reader, &r.Origin, &r.TTN,
			&r.Expires, &r.Notify)
		return r, err
	})
	require.NoError(e.t, err)
	return out
}

// deadLetter is a row of profile.dead_letters.
type deadLetter struct {
	Message       string
	Reason        string
	SQLState      string
	Context       string
	CorrelationID *string
	ProfileType   *string
	Operation     *string
	ReplayCount   int32
	Replayed      bool
	Resolved      bool
}

func (e *applyEnv) deadLetter(id int64) deadLetter {
	e.t.Helper()
	var d deadLetter
	require.NoError(e.t, e.tx.QueryRow(e.ctx, `
		SELECT message::text, reason, sqlstate, coalesce(context, ''), correlation_id, profile_type, operation,
		       replay_count, last_replayed IS NOT NULL, resolved IS NOT NULL
		FROM profile.dead_letters WHERE id = $1`, id).Scan(&d.Message, &d.Reason, &d.SQLState, &d.Context,
		&d.CorrelationID, &d.ProfileType, &d.Operation, &d.ReplayCount, &d.Replayed, &d.Resolved))
	return d
}

// m is an update of grain /g of $A: op, _v as JSON, and further _value fields as "key": value.
func m(op, v string, meta ...string) string {
	value := `{"_v":` + v
	for _, x := range meta {
		value += "," + x
	}
	return `{"_operation":"` + op + `","_id":"$A","_path":["g"],"_value":` + value + `}}`
}

func ptr[T any](v T) *T { return &v }

func TestProfileApplyOperations(t *testing.T) {
	t.Parallel()

	hist1000 := m("_set_with_history", `"y"`, `"_in":2000`) // after x@1000: pit x@1000, latest y@2000
	twoPits := []grainRow{gr("/g", `"x"`, 1000, hist()), gr("/g", `"y"`, 2000)}

	cases := []struct {
		name   string
		setup  []string
		update string
		status string
		want   []grainRow
	}{
		// _set
		{name: "_set creates a text grain", update: m("_set", `"x"`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000)}},
		{name: "_set with every metadata field",
			update: m("_set", `"x"`, `"_c":0.25`, `"_in":"2018-09-24"`, `"_ttl":"P3M"`, `"_ttn":"PT1H"`,
				`"_origin":"/belts/1"`, `"_reader":"_all"`),
			status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1537747200000, cert(0.25), ttl("P3M", "2018-12-24T00:00:00.000Z"),
				ttn("PT1H", "2018-09-24T01:00:00.000Z"), origin("/belts/1"), reader("_all"))}},
		{name: "_set replaces all metadata with the update's or the defaults",
			setup:  []string{m("_set", `"x"`, `"_c":0.5`, `"_in":1000`, `"_ttl":"P1D"`, `"_ttn":"P2D"`, `"_origin":"o"`, `"_reader":"r"`)},
			update: m("_set", `"y"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `"y"`, 2000)}},
		{name: "_set an array", update: m("_set", `["x","y"]`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `["x", "y"]`, 1000)}},
		{name: "_set is the default operation",
			update: `{"_id":"$A","_path":["g"],"_value":{"_v":"x","_in":1000}}`, status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000)}},
		{name: "_set with a profile type, a nested path, numeric strings and ignored keys",
			update: `{"_schema":"s1","_extra":[1],"_id":"$A","_profile_type":"customer","_path":["a","b\"c","ü"],
				"_value":{"_v":"x","_in":"1000","_c":"0.5","_other":true}}`, status: "ok",
			want: []grainRow{gr(`/a/b"c/ü`, `"x"`, 1000, ptype("customer"), cert(0.5))}},
		{name: "_set with path segments that look like the JSON separator",
			update: `{"_id":"$A","_path":["a",", ","b"],"_value":{"_v":"x","_in":1000}}`, status: "ok",
			want: []grainRow{gr("/a/, /b", `"x"`, 1000)}},
		{name: "_set with a path segment that starts with an underscore",
			update: `{"_id":"$A","_path":["_x","_latestx"],"_value":{"_v":"x","_in":1000}}`, status: "ok",
			want: []grainRow{gr("/_x/_latestx", `"x"`, 1000)}},
		{name: "_set with an ISO 8601 date-time with offset and milliseconds",
			update: m("_set", `"x"`, `"_in":"1970-01-01T01:00:01.5+01:00"`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1500)}},
		{name: "_set with _in as a whole JSON number in exponent form",
			update: m("_set", `"x"`, `"_in":1.5e3`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1500)}},
		// _set_if_not_exist
		{name: "_set_if_not_exist creates", update: m("_set_if_not_exist", `"x"`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000)}},
		{name: "_set_if_not_exist leaves an existing value alone, whatever its type",
			setup:  []string{m("_set", `"x"`, `"_in":1000`)},
			update: m("_set_if_not_exist", `["y"]`, `"_in":2000`), status: "noop",
			want: []grainRow{gr("/g", `"x"`, 1000)}},
		// _set_with_history
		{name: "_set_with_history on a missing grain", update: m("_set_with_history", `"x"`, `"_in":1000`),
			status: "ok", want: []grainRow{gr("/g", `"x"`, 1000)}},
		{name: "_set_with_history archives the old value with its metadata",
			setup:  []string{m("_set", `"x"`, `"_in":1000`, `"_c":0.5`, `"_ttl":"P1D"`, `"_origin":"o"`)},
			update: hist1000, status: "ok",
			want: []grainRow{
				gr("/g", `"x"`, 1000, hist(), cert(0.5), ttl("P1D", "1970-01-02T00:00:01.000Z"), origin("o")),
				gr("/g", `"y"`, 2000)}},
		{name: "_set_with_history archives an equal value too",
			setup:  []string{m("_set", `"x"`, `"_in":1000`)},
			update: m("_set_with_history", `"x"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, hist()), gr("/g", `"x"`, 2000)}},
		// _set_with_history_distinct
		{name: "_set_with_history_distinct does nothing for an equal value",
			setup:  []string{m("_set", `"x"`, `"_in":1000`)},
			update: m("_set_with_history_distinct", `"x"`, `"_in":2000`, `"_c":0.5`), status: "noop",
			want: []grainRow{gr("/g", `"x"`, 1000)}},
		{name: "_set_with_history_distinct: array order matters",
			setup:  []string{m("_set", `["a","b"]`, `"_in":1000`)},
			update: m("_set_with_history_distinct", `["b","a"]`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a", "b"]`, 1000, hist()), gr("/g", `["b", "a"]`, 2000)}},
		// _set_max, _set_min
		{name: "_set_max compares numbers numerically",
			setup:  []string{m("_set", `"9"`, `"_in":1000`)},
			update: m("_set_max", `"10"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `"10"`, 2000)}},
		{name: "_set_max keeps a higher value",
			setup:  []string{m("_set", `"10"`, `"_in":1000`)},
			update: m("_set_max", `"9.5"`, `"_in":2000`), status: "noop",
			want: []grainRow{gr("/g", `"10"`, 1000)}},
		{name: "_set_max keeps an equal value and its metadata",
			setup:  []string{m("_set", `"1e1"`, `"_in":1000`, `"_c":0.5`)},
			update: m("_set_max", `"10"`, `"_in":2000`), status: "noop",
			want: []grainRow{gr("/g", `"1e1"`, 1000, cert(0.5))}},
		{name: "_set_min compares ISO dates byte-wise",
			setup:  []string{m("_set", `"2020-01-02"`, `"_in":1000`)},
			update: m("_set_min", `"2019-12-31"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `"2019-12-31"`, 2000)}},
		{name: "_set_max compares text with a number byte-wise",
			setup:  []string{m("_set", `"abc"`, `"_in":1000`)},
			update: m("_set_max", `"10"`, `"_in":2000`), status: "noop",
			want: []grainRow{gr("/g", `"abc"`, 1000)}},
		{name: "_set_max on a missing grain", update: m("_set_max", `"5"`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `"5"`, 1000)}},
		{name: "_set_max overwrites all metadata",
			setup:  []string{m("_set", `"1"`, `"_in":1000`, `"_c":0.5`, `"_ttl":"P1D"`, `"_origin":"o"`)},
			update: m("_set_max", `"2"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `"2"`, 2000)}},
		{name: "_set_max_with_history archives when it overwrites",
			setup:  []string{m("_set", `"1"`, `"_in":1000`)},
			update: m("_set_max_with_history", `"2"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `"1"`, 1000, hist()), gr("/g", `"2"`, 2000)}},
		{name: "_set_min_with_history does nothing when it does not overwrite",
			setup:  []string{m("_set", `"1"`, `"_in":1000`)},
			update: m("_set_min_with_history", `"2"`, `"_in":2000`), status: "noop",
			want: []grainRow{gr("/g", `"1"`, 1000)}},
		// _delete, _delete_with_history
		{name: `_delete "" deletes _latest only`, setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete", `""`), status: "ok", want: twoPits[:1]},
		{name: `_delete [""] deletes _latest`, setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete", `[""]`), status: "ok", want: twoPits[:1]},
		{name: `_delete [] deletes _latest`, setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete", `[]`), status: "ok", want: twoPits[:1]},
		{name: "_delete a history pit", setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete", `["`+pitOf(1000)+`"]`), status: "ok", want: twoPits[1:]},
		{name: "_delete a history pit and _latest", setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete", `["`+pitOf(1000)+`",""]`), status: "ok", want: nil},
		{name: "_delete an unknown pit", setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete", `["_19990101T000000.000Z"]`), status: "noop", want: twoPits},
		{name: "_delete on a missing grain", update: m("_delete", `""`), status: "noop"},
		{name: "_delete_with_history removes every pit", setup: []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_delete_with_history", `""`), status: "ok"},
		{name: "_delete_with_history on a missing grain", update: m("_delete_with_history", `""`), status: "noop"},
		// _inc
		{name: "_inc creates a counter", update: m("_inc", `"0|1|1"`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `{"_step": 1, "_current": 1, "_initial": 0}`, 1000)}},
		{name: "_inc decrements", update: m("_inc", `"10|0.5|-1"`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `{"_step": 0.5, "_current": 9.5, "_initial": 10}`, 1000)}},
		{name: "_inc is exact and writes numbers without trailing zeros",
			update: m("_inc", `"1.50|0.1|7"`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `{"_step": 0.1, "_current": 2.2, "_initial": 1.5}`, 1000)}},
		{name: "_inc adds to an existing counter and keeps its metadata",
			setup:  []string{m("_inc", `"10|1|1"`, `"_in":1000`, `"_c":0.5`, `"_ttl":"P1D"`)},
			update: m("_inc", `"0|2|3"`, `"_in":2000`, `"_ttl":"P2D"`), status: "ok",
			want: []grainRow{gr("/g", `{"_step": 2, "_current": 17, "_initial": 10}`, 2000, cert(0.5),
				ttl("P1D", "1970-01-02T00:00:02.000Z"))}},
		// arrays
		{name: "_array_append creates the array as is", update: m("_array_append", `["a","a"]`, `"_in":1000`),
			status: "ok", want: []grainRow{gr("/g", `["a", "a"]`, 1000)}},
		{name: "_array_append appends and keeps the metadata",
			setup:  []string{m("_set", `["a"]`, `"_in":1000`, `"_c":0.5`, `"_origin":"o"`)},
			update: m("_array_append", `["b","a"]`, `"_in":2000`, `"_ttl":"P1D"`), status: "ok",
			want: []grainRow{gr("/g", `["a", "b", "a"]`, 2000, cert(0.5), origin("o"))}},
		{name: "_array_append_with_history archives",
			setup:  []string{m("_set", `["a"]`, `"_in":1000`)},
			update: m("_array_append_with_history", `["b"]`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a"]`, 1000, hist()), gr("/g", `["a", "b"]`, 2000)}},
		{name: "_array_put on a new grain inserts the array as is",
			update: m("_array_put", `["a","a","b"]`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `["a", "a", "b"]`, 1000)}},
		{name: "_array_put adds only new elements, once, in order",
			setup:  []string{m("_set", `["a","b"]`, `"_in":1000`, `"_c":0.5`)},
			update: m("_array_put", `["c","a","d","c"]`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a", "b", "c", "d"]`, 2000, cert(0.5))}},
		{name: "_array_put updates _in even without change",
			setup:  []string{m("_set", `["a"]`, `"_in":1000`)},
			update: m("_array_put", `["a"]`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a"]`, 2000)}},
		{name: "_array_put_with_history archives even without change",
			setup:  []string{m("_set", `["a"]`, `"_in":1000`)},
			update: m("_array_put_with_history", `["a"]`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a"]`, 1000, hist()), gr("/g", `["a"]`, 2000)}},
		{name: "_array_put_with_history_distinct does nothing without change",
			setup:  []string{m("_set", `["a","b"]`, `"_in":1000`)},
			update: m("_array_put_with_history_distinct", `["b","a"]`, `"_in":2000`), status: "noop",
			want: []grainRow{gr("/g", `["a", "b"]`, 1000)}},
		{name: "_array_put_with_history_distinct archives and puts on change",
			setup:  []string{m("_set", `["a"]`, `"_in":1000`)},
			update: m("_array_put_with_history_distinct", `["b","a"]`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a"]`, 1000, hist()), gr("/g", `["a", "b"]`, 2000)}},
		{name: "_array_put_with_history_distinct creates a missing grain",
			update: m("_array_put_with_history_distinct", `["b","b"]`, `"_in":1000`), status: "ok",
			want: []grainRow{gr("/g", `["b", "b"]`, 1000)}},
		{name: "_array_remove removes every match and keeps the metadata",
			setup:  []string{m("_set", `["a","b","a"]`, `"_in":1000`, `"_c":0.5`)},
			update: m("_array_remove", `"a"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["b"]`, 2000, cert(0.5))}},
		{name: "_array_remove leaves an empty array",
			setup:  []string{m("_set", `["a"]`, `"_in":1000`)},
			update: m("_array_remove", `"a"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `[]`, 2000)}},
		{name: "_array_remove on a missing grain", update: m("_array_remove", `"a"`), status: "noop"},
		{name: "_array_remove_with_history archives",
			setup:  []string{m("_set", `["a","b"]`, `"_in":1000`)},
			update: m("_array_remove_with_history", `"b"`, `"_in":2000`), status: "ok",
			want: []grainRow{gr("/g", `["a", "b"]`, 1000, hist()), gr("/g", `["a"]`, 2000)}},
		// _set_ttl, _set_ttn
		{name: `_set_ttl "" sets every pit, counted from each pit's inserted`,
			setup:  []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_set_ttl", `""`, `"_ttl":"P1D"`, `"_in":5000`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, hist(), ttl("P1D", "1970-01-02T00:00:01.000Z")),
				gr("/g", `"y"`, 2000, ttl("P1D", "1970-01-02T00:00:02.000Z"))}},
		{name: "_set_ttl on the listed pits",
			setup:  []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_set_ttl", `[""]`, `"_ttl":"PT1M"`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, hist()), gr("/g", `"y"`, 2000, ttl("PT1M", "1970-01-01T00:01:02.000Z"))}},
		{name: "_set_ttl with a duration as the value sets every pit",
			setup:  []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_set_ttl", `"P1W"`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, hist(), ttl("P1W", "1970-01-08T00:00:01.000Z")),
				gr("/g", `"y"`, 2000, ttl("P1W", "1970-01-08T00:00:02.000Z"))}},
		{name: "_set_ttl back to the default",
			setup:  []string{m("_set", `"x"`, `"_in":1000`, `"_ttl":"P1D"`, `"_c":0.5`)},
			update: m("_set_ttl", `""`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, cert(0.5))}},
		{name: "_set_ttl on a missing grain", update: m("_set_ttl", `""`, `"_ttl":"P1D"`), status: "noop"},
		{name: "_set_ttl on unknown pits", setup: []string{m("_set", `"x"`, `"_in":1000`)},
			update: m("_set_ttl", `["_19990101T000000.000Z"]`, `"_ttl":"P1D"`), status: "noop",
			want: []grainRow{gr("/g", `"x"`, 1000)}},
		{name: `_set_ttn "" sets every pit`,
			setup:  []string{m("_set", `"x"`, `"_in":1000`, `"_ttl":"P1D"`)},
			update: m("_set_ttn", `""`, `"_ttn":"PT1.5S"`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, ttl("P1D", "1970-01-02T00:00:01.000Z"),
				ttn("PT1.5S", "1970-01-01T00:00:02.500Z"))}},
		{name: "_set_ttn on the listed pits",
			setup:  []string{m("_set", `"x"`, `"_in":1000`), hist1000},
			update: m("_set_ttn", `["`+pitOf(1000)+`"]`, `"_ttn":"P1Y2M3DT4H5M6S"`), status: "ok",
			want: []grainRow{gr("/g", `"x"`, 1000, hist(), ttn("P1Y2M3DT4H5M6S", "1971-03-04T04:05:07.000Z")),
				gr("/g", `"y"`, 2000)}},
		// _profile_link
		{name: "_profile_link writes the link row, ignoring _path and _profile_type",
			update: `{"_operation":"_profile_link","_id":"$A","_profile_type":"x","_path":["p"],"_value":{"_v":"$B","_in":1000}}`,
			status: "ok", want: []grainRow{gr("/new", `"$B"`, 1000, ptype("profile_link"))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApplyEnv(t)
			for _, s := range tc.setup {
				require.Equal(t, "ok", e.one(s).Status, s)
			}
			res := e.one(tc.update)
			require.Equal(t, tc.status, res.Status, "%+v", res)
			require.Nil(t, res.DeadLetterID)
			require.Nil(t, res.SQLState)
			require.Equal(t, e.id("$A"), *res.CorrelationID)
			want := make([]grainRow, len(tc.want))
			for i, w := range tc.want {
				withIDs(e)(&w)
				want[i] = w
			}
			require.Equal(t, want, nilIfEmpty(e.grains("$A")))
		})
	}
}

func nilIfEmpty(rs []grainRow) []grainRow {
	if len(rs) == 0 {
		return []grainRow{}
	}
	return rs
}

// A missing _in is the time the batch is applied (not the transaction's start), in epoch milliseconds.
func TestProfileApplyDefaultInsertionTime(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	clock := func() int64 {
		var ms int64
		require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms))
		return ms
	}
	// The time the batch is applied, not the transaction's start.
	time.Sleep(20 * time.Millisecond)
	before := clock()
	require.Equal(t, "ok", e.one(m("_set", `"x"`)).Status)
	after := clock()
	got := e.grains("$A")
	require.Len(t, got, 1)
	require.GreaterOrEqual(t, got[0].In, before)
	require.LessOrEqual(t, got[0].In, after)
	require.Equal(t, []grainRow{gr("/g", `"x"`, got[0].In)}, got)
}

// The counter of an _inc: whole numbers are recognised without the regular expression, and every
// text gets what the regular expression alone gives.
func TestProfileCounterShapes(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	const strict = `CASE WHEN length($1) <= 400
		AND $1 ~ '^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?\|[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?\|[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$'
		THEN ARRAY[split_part($1, '|', 1)::numeric, split_part($1, '|', 2)::numeric, split_part($1, '|', 3)::numeric] END`
	for _, v := range []string{"0|1|1", "10|2|3", "007|0|0", "1|2", "1|2|3|4", "|1|2", "1||2", "1|2|", "||",
		"|", "", "1.5|2|3", "+1|-2|3", "1e3|1|1", "1e9999|1|1", "a|b|c", "١|2|3", "1 |2|3", " 1|2|3",
		strings.Repeat("9", 390) + "|1|1", strings.Repeat("9", 400) + "|1|1"} {
		var got, want []string
		require.NoError(t, tx.QueryRow(ctx, `SELECT profile_private.counter($1)::text[]`, v).Scan(&got), v)
		require.NoError(t, tx.QueryRow(ctx, `SELECT (`+strict+`)::text[]`, v).Scan(&want), v)
		require.Equal(t, want, got, "%q", v)
	}
}

func TestProfileApplyDeadLetters(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 2100)
	cases := []struct {
		name     string
		setup    []string
		update   string
		sqlstate string
		reason   string
		context  string // checked when set
	}{
		{"not an object: number", nil, `5`, "SPMSG", "Update must be a JSON object", "validating the update message"},
		{"not an object: array", nil, `[{"_id":"$A"}]`, "SPMSG", "Update must be a JSON object", ""},
		{"not an object: null", nil, `null`, "SPMSG", "Update must be a JSON object", ""},
		{"_operation not a string", nil, `{"_operation":5,"_id":"$A","_path":["g"],"_value":{"_v":"x"}}`, "SPOPR", "_operation must be a String", "validating _operation"},
		{"unknown operation", nil, m("_frobnicate", `"x"`), "SPOPR", "Unknown operation _frobnicate", ""},
		{"_id missing", nil, `{"_path":["g"],"_value":{"_v":"x"}}`, "SPIDX", "_id can not be null", "validating _id"},
		{"_id not a string", nil, `{"_id":5,"_path":["g"],"_value":{"_v":"x"}}`, "SPIDX", "_id must be a String", ""},
		{"_id empty", nil, `{"_id":"","_path":["g"],"_value":{"_v":"x"}}`, "SPIDX", "_id can not be empty", ""},
		{"_profile_type empty", nil, `{"_id":"$A","_profile_type":"","_path":["g"],"_value":{"_v":"x"}}`, "SPMSG", "_profile_type must be a non-empty String", ""},
		{"_profile_type not a string", nil, `{"_id":"$A","_profile_type":["a"],"_path":["g"],"_value":{"_v":"x"}}`, "SPMSG", "_profile_type must be a non-empty String", ""},
		{"_profile_type profile_link is reserved", nil, `{"_id":"$A","_profile_type":"profile_link","_path":["new"],"_value":{"_v":"x"}}`, "SPRSV",
			"Profile type profile_link is reserved for profile links: only _profile_link, _delete, _delete_with_history, _set_ttl and _set_ttn may address it", ""},
		{"_path missing", nil, `{"_id":"$A","_value":{"_v":"x"}}`, "SPPTH", "_path can not be null", "validating _path"},
		{"_path a string", nil, `{"_id":"$A","_path":"g","_value":{"_v":"x"}}`, "SPPTH", "_path must be an Array of at least one String", ""},
		{"_path empty", nil, `{"_id":"$A","_path":[],"_value":{"_v":"x"}}`, "SPPTH", "_path must be an Array of at least one String", ""},
		{"_path with a number", nil, `{"_id":"$A","_path":["a",1],"_value":{"_v":"x"}}`, "SPPTH", "_path must be an Array of at least one String", ""},
		{"_path with an empty segment", nil, `{"_id":"$A","_path":["a",""],"_value":{"_v":"x"}}`, "SPPTH", "_path segments can not be empty", ""},
		{"_path with an empty segment in the middle", nil, `{"_id":"$A","_path":["a","","b"],"_value":{"_v":"x"}}`, "SPPTH", "_path segments can not be empty", ""},
		{"_path with an empty first segment", nil, `{"_id":"$A","_path":["","b"],"_value":{"_v":"x"}}`, "SPPTH", "_path segments can not be empty", ""},
		{"_path with a number in the middle", nil, `{"_id":"$A","_path":["a",1,"b"],"_value":{"_v":"x"}}`, "SPPTH", "_path must be an Array of at least one String", ""},
		{"_path with an array in it", nil, `{"_id":"$A","_path":["a",["b"],"c"],"_value":{"_v":"x"}}`, "SPPTH", "_path must be an Array of at least one String", ""},
		{"_path with a slash in a later segment", nil, `{"_id":"$A","_path":["a","b/c"],"_value":{"_v":"x"}}`, "SPPTH", `_path segments can not contain "/"`, ""},
		{"_path with a slash", nil, `{"_id":"$A","_path":["a/b"],"_value":{"_v":"x"}}`, "SPPTH", `_path segments can not contain "/"`, ""},
		{"_path with a slash and an escape", nil, `{"_id":"$A","_path":["a\"/b"],"_value":{"_v":"x"}}`, "SPPTH", `_path segments can not contain "/"`, ""},
		{"_path segment _latest", nil, `{"_id":"$A","_path":["a","_latest"],"_value":{"_v":"x"}}`, "SPPTH", "_path segments can not be _latest or a point in time like _20210706T155637.111Z", ""},
		{"_path segment like a pit", nil, `{"_id":"$A","_path":["_20210706T155637.111Z","b"],"_value":{"_v":"x"}}`, "SPPTH", "_path segments can not be _latest or a point in time like _20210706T155637.111Z", ""},
		{"_path segment like a pit, escaped path", nil, `{"_id":"$A","_path":["a\n","_latest"],"_value":{"_v":"x"}}`, "SPPTH", "_path segments can not be _latest or a point in time like _20210706T155637.111Z", ""},
		{"_path starting with _id", nil, `{"_id":"$A","_path":["_id","b"],"_value":{"_v":"x"}}`, "SPPTH", "_path can not start with _id, the profile's own id", ""},
		{"key too long", nil, `{"_id":"$A","_path":["` + long + `"],"_value":{"_v":"x"}}`, "SPMSG", "The grain key (_id, _profile_type, _path) is longer than 2000 bytes", ""},
		{"_value missing", nil, `{"_id":"$A","_path":["g"]}`, "SPMSG", "_value can not be null", "validating _value"},
		{"_value not an object", nil, `{"_id":"$A","_path":["g"],"_value":"x"}`, "SPMSG", "_value must be an Object", ""},
		{"_v missing", nil, `{"_id":"$A","_path":["g"],"_value":{"_c":1}}`, "SPVAL", "_v can not be null", "validating _v"},
		{"_v null", nil, m("_set", `null`), "SPVAL", "_v can not be null", ""},
		{"_set with a number", nil, m("_set", `5`), "SPVAL", "Value must be a String or an Array of Strings", "validating _v for _set"},
		{"_set with an object", nil, m("_set", `{"a":"b"}`), "SPVAL", "Value must be a String or an Array of Strings", ""},
		{"_set with an array of numbers", nil, m("_set", `["a",1]`), "SPVAL", "Value must be a String or an Array of Strings", ""},
		{"_set_max with an array", nil, m("_set_max", `["1"]`), "SPVAL", "Value must be a String", ""},
		{"_set_min_with_history with a number", nil, m("_set_min_with_history", `1`), "SPVAL", "Value must be a String", ""},
		{"_array_append with a string", nil, m("_array_append", `"a"`), "SPVAL", "Value must be an Array", "validating _v for _array_append"},
		{"_array_put_with_history with a string", nil, m("_array_put_with_history", `"a"`), "SPVAL", "Value must be an Array", ""},
		{"_array_put with a number in it", nil, m("_array_put", `["a",null]`), "SPVAL", "Value must be an Array of Strings", ""},
		{"_array_remove with an array", nil, m("_array_remove", `["a"]`), "SPVAL", "Value must be a String", ""},
		{"_inc with two parts", nil, m("_inc", `"1|2"`), "SPVAL", "Value must be a counter like initialvalue|stepsize|steps, e.g. 0|1|1", ""},
		{"_inc with words", nil, m("_inc", `"a|b|c"`), "SPVAL", "Value must be a counter like initialvalue|stepsize|steps, e.g. 0|1|1", ""},
		{"_inc with a huge exponent", nil, m("_inc", `"1e99999|1|1"`), "SPVAL", "Value must be a counter like initialvalue|stepsize|steps, e.g. 0|1|1", ""},
		{"_inc with a number", nil, m("_inc", `5`), "SPVAL", "Value must be a String", ""},
		{"_delete with a string", nil, m("_delete", `"x"`), "SPVAL", `Value must be "" or an Array of pits`, ""},
		{"_delete with an array of numbers", nil, m("_delete", `[1]`), "SPVAL", `Value must be "" or an Array of pits`, ""},
		{"_delete_with_history with an array", nil, m("_delete_with_history", `[]`), "SPVAL", `Value must be ""`, ""},
		{"_set_ttl with a word", nil, m("_set_ttl", `"x"`), "SPVAL", `Value must be "", an Array of pits or an ISO 8601 duration`, ""},
		{"_set_ttn with a negative duration", nil, m("_set_ttn", `"P-1D"`), "SPDUR", "Value (_v) contains a negative number", ""},
		{"_profile_link to nobody", nil, `{"_operation":"_profile_link","_id":"$A","_value":{"_v":""}}`, "SPVAL", "Value must be a non-empty String, the correlation id to link to", ""},
		{"_profile_link with an array", nil, `{"_operation":"_profile_link","_id":"$A","_value":{"_v":["$B"]}}`, "SPVAL", "Value must be a non-empty String, the correlation id to link to", ""},
		{"_profile_link to a target too long", nil, `{"_operation":"_profile_link","_id":"$A","_value":{"_v":"` + strings.Repeat("t", 513) + `"}}`, "SPVAL", "The link target (_v) is longer than 512 bytes", "validating _v for _profile_link"},
		{"_c above 1", nil, m("_set", `"x"`, `"_c":1.5`), "SPCRT", "Certainty (_c) must be a number between 0 and 1", "validating _c"},
		{"_c negative", nil, m("_set", `"x"`, `"_c":-0.1`), "SPCRT", "Certainty (_c) must be a number between 0 and 1", ""},
		{"_c a word", nil, m("_set", `"x"`, `"_c":"high"`), "SPCRT", "Certainty (_c) must be a number between 0 and 1", ""},
		{"_c a boolean", nil, m("_set", `"x"`, `"_c":true`), "SPCRT", "Certainty (_c) must be a number between 0 and 1", ""},
		{"_c huge", nil, m("_set", `"x"`, `"_c":1e300`), "SPCRT", "Certainty (_c) must be a number between 0 and 1", ""},
		{"_in negative", nil, m("_set", `"x"`, `"_in":-1`), "SPINS", "Creation timestamp (_in) can not be negative", "validating _in"},
		{"_in negative string", nil, m("_set", `"x"`, `"_in":"-5"`), "SPINS", "Creation timestamp (_in) can not be negative", ""},
		{"_in before 1970", nil, m("_set", `"x"`, `"_in":"1969-12-31"`), "SPINS", "Creation timestamp (_in) can not be negative", ""},
		{"_in not whole", nil, m("_set", `"x"`, `"_in":1.5`), "SPINS", "Creation timestamp (_in) must be a whole number of milliseconds", ""},
		{"_in an impossible date", nil, m("_set", `"x"`, `"_in":"2018-02-30"`), "SPINS", "Creation timestamp (_in) must be epoch milliseconds or an ISO 8601 date", ""},
		{"_in a word", nil, m("_set", `"x"`, `"_in":"yesterday"`), "SPINS", "Creation timestamp (_in) must be epoch milliseconds or an ISO 8601 date", ""},
		{"_in a boolean", nil, m("_set", `"x"`, `"_in":false`), "SPINS", "Creation timestamp (_in) must be epoch milliseconds or an ISO 8601 date", ""},
		{"_in after 9999", nil, m("_set", `"x"`, `"_in":1e20`), "SPINS", "Creation timestamp (_in) is out of range (after 9999-12-31)", ""},
		{"_ttl in PostgreSQL's words", nil, m("_set", `"x"`, `"_ttl":"1 day"`), "SPDUR", "Time to live (_ttl) must be an ISO 8601 duration like P3M, P1DT12H or PT30S", "validating _ttl"},
		{"_ttl negative", nil, m("_set", `"x"`, `"_ttl":"P-1D"`), "SPDUR", "Time to live (_ttl) contains a negative number", ""},
		{"_ttl negative in front", nil, m("_set", `"x"`, `"_ttl":"-P1D"`), "SPDUR", "Time to live (_ttl) contains a negative number", ""},
		{"_ttl empty", nil, m("_set", `"x"`, `"_ttl":"P"`), "SPDUR", "Time to live (_ttl) must be an ISO 8601 duration like P3M, P1DT12H or PT30S", ""},
		{"_ttl with a dangling T", nil, m("_set", `"x"`, `"_ttl":"P1DT"`), "SPDUR", "Time to live (_ttl) must be an ISO 8601 duration like P3M, P1DT12H or PT30S", ""},
		{"_ttl with a comma", nil, m("_set", `"x"`, `"_ttl":"P1,5D"`), "SPDUR", "Time to live (_ttl) must be an ISO 8601 duration like P3M, P1DT12H or PT30S", ""},
		{"_ttl a number", nil, m("_set", `"x"`, `"_ttl":5`), "SPDUR", "Time to live (_ttl) must be a String", ""},
		{"_ttl too long", nil, m("_set", `"x"`, `"_ttl":"P99999999999Y"`), "SPDUR", "Time to live (_ttl) is out of range", ""},
		{"_ttn bad", nil, m("_set", `"x"`, `"_ttn":"PT5X"`), "SPDUR", "Time to notification (_ttn) must be an ISO 8601 duration like P3M, P1DT12H or PT30S", "validating _ttn"},
		{"_origin a number", nil, m("_set", `"x"`, `"_origin":5`), "SPMSG", "_origin must be a String", "validating _origin"},
		{"_reader empty", nil, m("_set", `"x"`, `"_reader":""`), "SPMSG", "_reader must be a non-empty String", "validating _reader"},
		{"_reader a list", nil, m("_set", `"x"`, `"_reader":["a"]`), "SPMSG", "_reader must be a non-empty String", ""},
		{"_reader empty next to other metadata", nil, m("_set", `"x"`, `"_ttl":"P1D"`, `"_reader":""`), "SPMSG", "_reader must be a non-empty String", ""},
		{"_in a word next to _c", nil, m("_inc", `"0|1|1"`, `"_c":0.5`, `"_in":"soon"`), "SPINS", "Creation timestamp (_in) must be epoch milliseconds or an ISO 8601 date", ""},
		// The grain type is fixed when the grain is created.
		{"array operation on a text grain", []string{m("_set", `"x"`)}, m("_array_append", `["y"]`), "SPTYP",
			"Grain type differs from the existing grain: _array_append writes grain type a, the grain at /g has grain type t",
			"applying _array_append: grain type check"},
		{"text on an array grain", []string{m("_set", `["x"]`)}, m("_set", `"y"`), "SPTYP",
			"Grain type differs from the existing grain: _set writes grain type t, the grain at /g has grain type a", ""},
		{"_inc on a text grain", []string{m("_set", `"1"`)}, m("_inc", `"0|1|1"`), "SPTYP",
			"Grain type differs from the existing grain: _inc writes grain type c, the grain at /g has grain type t", ""},
		{"_set_max on a counter", []string{m("_inc", `"0|1|1"`)}, m("_set_max", `"5"`), "SPTYP",
			"Grain type differs from the existing grain: _set_max writes grain type t, the grain at /g has grain type c", ""},
		{"_array_remove on a text grain", []string{m("_set", `"a"`)}, m("_array_remove", `"a"`), "SPTYP",
			"Grain type differs from the existing grain: _array_remove writes grain type a, the grain at /g has grain type t", ""},
		{"array on a grain that has only history left",
			[]string{m("_set", `"x"`, `"_in":1000`), m("_set_with_history", `"y"`, `"_in":2000`), m("_delete", `""`)},
			m("_set", `["z"]`), "SPTYP",
			"Grain type differs from the existing grain: _set writes grain type a, the grain at /g has grain type t", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newApplyEnv(t)
			for _, s := range tc.setup {
				require.Equal(t, "ok", e.one(s).Status, s)
			}
			before := e.grains("$A")
			res := e.one(tc.update)
			require.Equal(t, "dead_letter", res.Status)
			require.Equal(t, tc.sqlstate, *res.SQLState)
			require.Equal(t, tc.reason, *res.Reason)
			require.NotNil(t, res.DeadLetterID)
			dl := e.deadLetter(*res.DeadLetterID)
			require.Equal(t, tc.sqlstate, dl.SQLState)
			require.Equal(t, tc.reason, dl.Reason)
			if tc.context != "" {
				require.Equal(t, tc.context, dl.Context)
			}
			require.JSONEq(t, e.ids.Replace(tc.update), dl.Message)
			require.Zero(t, dl.ReplayCount)
			require.False(t, dl.Resolved)
			require.Equal(t, before, e.grains("$A"), "a rejected update changes nothing")
		})
	}
}

// The dead letter's filter columns come from the message when they are strings.
func TestProfileApplyDeadLetterColumns(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	res := e.batch(
		`{"_operation":"_inc","_id":"$A","_profile_type":"customer","_path":["g"],"_value":{"_v":"x"}}`,
		`{"_id":"$A","_path":["g"],"_value":{"_v":5}}`,
		`{"_operation":7,"_id":8,"_profile_type":9}`,
		`"just a string"`,
	)
	d1 := e.deadLetter(*res[0].DeadLetterID)
	require.Equal(t, ptr(e.id("$A")), d1.CorrelationID)
	require.Equal(t, ptr("customer"), d1.ProfileType)
	require.Equal(t, ptr("_inc"), d1.Operation)
	d2 := e.deadLetter(*res[1].DeadLetterID)
	require.Equal(t, ptr("_d"), d2.ProfileType)
	require.Equal(t, ptr("_set"), d2.Operation)
	d3 := e.deadLetter(*res[2].DeadLetterID)
	require.Nil(t, d3.CorrelationID)
	require.Nil(t, d3.ProfileType)
	require.Nil(t, d3.Operation)
	d4 := e.deadLetter(*res[3].DeadLetterID)
	require.Equal(t, `"just a string"`, d4.Message)
	require.Nil(t, d4.Operation)
	// Dead letters are numbered in batch order.
	require.Less(t, *res[0].DeadLetterID, *res[1].DeadLetterID)
	require.Less(t, *res[1].DeadLetterID, *res[2].DeadLetterID)
	require.Less(t, *res[2].DeadLetterID, *res[3].DeadLetterID)
}

func TestProfileApplyBatchSemantics(t *testing.T) {
	t.Parallel()

	t.Run("updates of one grain apply in batch order", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res := e.batch(
			m("_set", `"x"`, `"_in":1000`),
			m("_set", `"y"`, `"_in":2000`),
			m("_set_with_history", `"z"`, `"_in":3000`),
			m("_set_if_not_exist", `"w"`),
		)
		require.Equal(t, []string{"ok", "ok", "ok", "noop"}, statuses(res))
		require.Equal(t, []grainRow{gr("/g", `"y"`, 2000, hist()), gr("/g", `"z"`, 3000)}, e.grains("$A"))
	})

	t.Run("a bad update in the middle stops nothing and undoes nothing", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res := e.batch(
			m("_set", `"x"`, `"_in":1000`),
			m("_array_append", `["y"]`),
			`{"_id":"$B","_path":["g"],"_value":{"_v":"b","_in":1000}}`,
			`{"_operation":"_inc","_id":"$B","_path":["g"],"_value":{"_v":"0|1|1"}}`,
			m("_set", `"z"`, `"_in":2000`),
		)
		require.Equal(t, []string{"ok", "dead_letter", "ok", "dead_letter", "ok"}, statuses(res))
		for i, r := range res {
			require.Equal(t, int32(i+1), r.Ord)
			require.Equal(t, r.Status == "dead_letter", r.DeadLetterID != nil)
			require.Equal(t, r.Status == "dead_letter", r.SQLState != nil)
		}
		require.Equal(t, ptr("_array_append"), res[1].Operation)
		require.Equal(t, ptr(e.id("$B")), res[3].CorrelationID)
		require.Equal(t, []grainRow{gr("/g", `"z"`, 2000)}, e.grains("$A"))
		require.Equal(t, []grainRow{gr("/g", `"b"`, 1000)}, e.grains("$B"))
	})

	t.Run("plain _set updates that meet another grain type, among others", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.one(m("_set", `["x"]`, `"_in":1000`))
		e.batch(
			`{"_id":"$B","_path":["g"],"_value":{"_v":"x","_in":1000}}`,
			`{"_operation":"_set_with_history","_id":"$B","_path":["g"],"_value":{"_v":"y","_in":2000}}`,
			`{"_operation":"_delete","_id":"$B","_path":["g"],"_value":{"_v":""}}`,
		)
		res := e.batch(
			`{"_id":"$C","_path":["g"],"_value":{"_v":"c","_in":1000}}`,
			m("_set", `"t"`, `"_in":2000`),
			`{"_id":"$B","_path":["g"],"_value":{"_v":["z"],"_in":3000}}`,
			`{"_id":"$A","_path":["h"],"_value":{"_v":"h","_in":1000}}`,
			`{"_operation":"_inc","_id":"$C","_path":["n"],"_value":{"_v":"0|1|1","_in":1000}}`,
		)
		require.Equal(t, []string{"ok", "dead_letter", "dead_letter", "ok", "ok"}, statuses(res))
		require.Equal(t, ptr("SPTYP"), res[1].SQLState)
		require.Equal(t, ptr("Grain type differs from the existing grain: _set writes grain type t, the grain at /g has grain type a"), res[1].Reason)
		require.Equal(t, ptr("SPTYP"), res[2].SQLState)
		require.Equal(t, ptr("Grain type differs from the existing grain: _set writes grain type a, the grain at /g has grain type t"), res[2].Reason)
		require.NotNil(t, res[1].DeadLetterID)
		require.NotNil(t, res[2].DeadLetterID)
		require.Equal(t, "applying _set: grain type check", e.deadLetter(*res[2].DeadLetterID).Context)
		require.Equal(t, []grainRow{gr("/g", `["x"]`, 1000), gr("/h", `"h"`, 1000)}, e.grains("$A"))
		require.Equal(t, []grainRow{gr("/g", `"x"`, 1000, hist())}, e.grains("$B"))
		require.Equal(t, []grainRow{gr("/g", `"c"`, 1000), gr("/n", `{"_step": 1, "_current": 1, "_initial": 0}`, 1000)},
			e.grains("$C"))
	})

	t.Run("one object is a batch of one", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res, err := e.q.ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(e.ids.Replace(m("_set", `"x"`, `"_in":1000`)))})
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Equal(t, "ok", res[0].Status)
		require.Equal(t, int32(1), res[0].Ord)
	})

	t.Run("an empty batch", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res, err := e.q.ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(`[]`)})
		require.NoError(t, err)
		require.Empty(t, res)
	})

	t.Run("anything but an object or an array is refused", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		for _, in := range []string{`5`, `"x"`, `null`, `true`} {
			err := dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
				_, err := db.New(tx).ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(in)})
				return err
			})
			requireSQLState(t, err, "SLINV")
		}
		err := dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: nil})
			return err
		})
		requireSQLState(t, err, "SLINV")
	})

	t.Run("profile_apply applies one message", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res, err := e.q.ProfileApply(e.ctx, json.RawMessage(e.ids.Replace(m("_set", `"x"`, `"_in":1000`))))
		require.NoError(t, err)
		require.Equal(t, db.ProfileApplyRow{Status: "ok", Operation: ptr("_set"), CorrelationID: ptr(e.id("$A"))}, res)
		res, err = e.q.ProfileApply(e.ctx, json.RawMessage(`[1]`))
		require.NoError(t, err)
		require.Equal(t, "dead_letter", res.Status)
		require.Equal(t, ptr("Update must be a JSON object"), res.Reason)
		err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).ProfileApply(e.ctx, nil)
			return err
		})
		requireSQLState(t, err, "SLINV")
	})

	t.Run("many updates of one grain", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		msgs := make([]string, 60)
		for i := range msgs {
			msgs[i] = m("_inc", `"0|1|1"`, fmt.Sprintf(`"_in":%d`, 1000+i))
		}
		res := e.batch(msgs...)
		for _, r := range res {
			require.Equal(t, "ok", r.Status)
		}
		require.Equal(t, []grainRow{gr("/g", `{"_step": 1, "_current": 60, "_initial": 0}`, 1059)}, e.grains("$A"))
	})
}

func statuses(rs []db.ProfileApplyBatchRow) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Status
	}
	return out
}

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v", code, err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

func TestProfileHistoryPitCollision(t *testing.T) {
	t.Parallel()

	t.Run("values inserted in the same millisecond", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.batch(
			m("_set_with_history", `"a"`, `"_in":1000`),
			m("_set_with_history", `"b"`, `"_in":1000`),
			m("_set_with_history", `"c"`, `"_in":1000`),
			m("_set_with_history", `"d"`, `"_in":1000`),
		)
		require.Equal(t, []grainRow{
			gr("/g", `"a"`, 1000, atPit("_19700101T000001.000Z")),
			gr("/g", `"b"`, 1000, atPit("_19700101T000001.001Z")),
			gr("/g", `"c"`, 1000, atPit("_19700101T000001.002Z")),
			gr("/g", `"d"`, 1000),
		}, e.grains("$A"))
	})

	t.Run("a taken pit moves the archived value 1 ms later, across batches", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.one(m("_set", `"a"`, `"_in":1000`))
		e.one(m("_set_with_history", `"b"`, `"_in":1000`))     // a -> .000
		e.one(m("_array_put", `["x"]`, `"_in":1001`))          // another grain type would be refused:
		e.one(m("_set_with_history", `"c"`, `"_in":2000`))     // b (1000) -> .000 taken -> .001
		e.one(m("_set_max_with_history", `"d"`, `"_in":3000`)) // c (2000) -> free
		require.Equal(t, []grainRow{
			gr("/g", `"a"`, 1000, atPit("_19700101T000001.000Z")),
			gr("/g", `"b"`, 1000, atPit("_19700101T000001.001Z")),
			gr("/g", `"c"`, 2000, hist()),
			gr("/g", `"d"`, 3000),
		}, e.grains("$A"))
	})
}

func TestProfileLinks(t *testing.T) {
	t.Parallel()
	link := func(from, to string) string {
		return `{"_operation":"_profile_link","_id":"` + from + `","_value":{"_v":"` + to + `","_in":1000}}`
	}
	set := func(id, v string) string {
		return `{"_id":"` + id + `","_path":["g"],"_value":{"_v":"` + v + `","_in":1000}}`
	}

	t.Run("updates follow links transitively", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		require.Equal(t, []string{"ok", "ok"}, statuses(e.batch(link("$A", "$B"), link("$B", "$C"))))
		res := e.one(set("$A", "x"))
		require.Equal(t, "ok", res.Status)
		require.Equal(t, ptr(e.id("$C")), res.CorrelationID)
		require.Equal(t, []grainRow{gr("/g", `"x"`, 1000)}, e.grains("$C"))
		require.Equal(t, []grainRow{gr("/new", `"$B"`, 1000, ptype("profile_link"), withIDs(e))}, e.grains("$A"))
		for _, from := range []string{"$A", "$B", "$C"} {
			target, err := e.q.ProfileLinkResolve(e.ctx, e.id(from))
			require.NoError(t, err)
			require.Equal(t, e.id("$C"), target)
		}
		target, err := e.q.ProfileLinkResolve(e.ctx, e.id("$D"))
		require.NoError(t, err)
		require.Equal(t, e.id("$D"), target)
	})

	t.Run("a link that would close a cycle is refused", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.batch(link("$A", "$B"), link("$B", "$C"))
		res := e.one(link("$C", "$A"))
		require.Equal(t, "dead_letter", res.Status)
		require.Equal(t, ptr("SPLNK"), res.SQLState)
		require.Equal(t, ptr("Profile link would create a cycle: "+e.id("$C")+" -> "+e.id("$A")+" -> "+e.id("$B")+" -> "+e.id("$C")), res.Reason)
		self := e.one(link("$D", "$D"))
		require.Equal(t, ptr("SPLNK"), self.SQLState)
		require.Equal(t, ptr("Profile link would create a cycle: "+e.id("$D")+" -> "+e.id("$D")), self.Reason)
		require.Empty(t, e.grains("$C"))
		require.Empty(t, e.grains("$D"))
	})

	t.Run("a later link replaces an earlier one", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.batch(link("$A", "$B"), link("$A", "$C"), set("$A", "x"))
		require.Empty(t, e.grains("$B"))
		require.Equal(t, []grainRow{gr("/g", `"x"`, 1000)}, e.grains("$C"))
	})

	t.Run("deletes and links are not redirected", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res := e.batch(
			set("$A", "own"),
			link("$A", "$B"),
			set("$A", "redirected"),
			`{"_operation":"_delete","_id":"$A","_path":["g"],"_value":{"_v":""}}`,
			`{"_operation":"_set_ttl","_id":"$A","_path":["g"],"_value":{"_v":"","_ttl":"P1D"}}`,
		)
		require.Equal(t, []string{"ok", "ok", "ok", "ok", "ok"}, statuses(res))
		require.Equal(t, ptr(e.id("$A")), res[0].CorrelationID)
		require.Equal(t, ptr(e.id("$B")), res[2].CorrelationID)
		require.Equal(t, ptr(e.id("$A")), res[3].CorrelationID)
		require.Equal(t, ptr(e.id("$B")), res[4].CorrelationID)
		require.Equal(t, []grainRow{gr("/new", `"$B"`, 1000, ptype("profile_link"), withIDs(e))}, e.grains("$A"))
		require.Equal(t, []grainRow{gr("/g", `"redirected"`, 1000, ttl("P1D", "1970-01-02T00:00:01.000Z"))}, e.grains("$B"))
	})

	t.Run("links change within a batch, in batch order", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		res := e.batch(
			set("$A", "1"),
			link("$A", "$B"),
			set("$A", "2"),
			`{"_operation":"_delete","_id":"$A","_profile_type":"profile_link","_path":["new"],"_value":{"_v":""}}`,
			set("$A", "3"),
			link("$A", "$C"),
			`{"_operation":"_inc","_id":"$A","_path":["n"],"_value":{"_v":"0|1|1","_in":1000}}`,
			link("$C", "$A"),
		)
		require.Equal(t, []string{"ok", "ok", "ok", "ok", "ok", "ok", "ok", "dead_letter"}, statuses(res))
		require.Equal(t, []grainRow{
			gr("/g", `"3"`, 1000),
			gr("/new", `"$C"`, 1000, ptype("profile_link"), withIDs(e)),
		}, e.grains("$A"))
		require.Equal(t, []grainRow{gr("/g", `"2"`, 1000)}, e.grains("$B"))
		require.Equal(t, []grainRow{gr("/n", `{"_step": 1, "_current": 1, "_initial": 0}`, 1000)}, e.grains("$C"))
	})

	t.Run("two linked ids writing one grain in one batch apply in order", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		require.Equal(t, []string{"ok", "ok"}, statuses(e.batch(link("$A", "$C"), link("$B", "$C"))))
		res := e.batch(set("$A", "1"), set("$B", "2"),
			`{"_operation":"_set_with_history","_id":"$A","_path":["g"],"_value":{"_v":"3","_in":2000}}`)
		require.Equal(t, []string{"ok", "ok", "ok"}, statuses(res))
		for _, r := range res {
			require.Equal(t, ptr(e.id("$C")), r.CorrelationID)
		}
		require.Equal(t, []grainRow{gr("/g", `"2"`, 1000, hist()), gr("/g", `"3"`, 2000)}, e.grains("$C"))
	})

	t.Run("durations of a link can be set", func(t *testing.T) {
		t.Parallel()
		e := newApplyEnv(t)
		e.one(link("$A", "$B"))
		res := e.one(`{"_operation":"_set_ttl","_id":"$A","_profile_type":"profile_link","_path":["new"],"_value":{"_v":"P1D"}}`)
		require.Equal(t, "ok", res.Status)
		require.Equal(t, []grainRow{gr("/new", `"$B"`, 1000, ptype("profile_link"), withIDs(e),
			ttl("P1D", "1970-01-02T00:00:01.000Z"))}, e.grains("$A"))
	})
}

// An unexpected error (here a trigger that refuses one value) sends the batch into safe mode: each
// update in its own subtransaction, only the failing one dead-lettered, with PostgreSQL's SQLSTATE
// and error context. Runs in a database of its own: the trigger must not touch other tests.
func TestProfileApplySafeMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `
		CREATE FUNCTION public.tg_refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.value = '"boom"' THEN
				RAISE EXCEPTION 'boom refused' USING ERRCODE = 'P0001', DETAIL = 'a test trigger';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_boom BEFORE INSERT OR UPDATE ON profile.profilestore
			FOR EACH ROW EXECUTE FUNCTION public.tg_refuse_boom();`)
	require.NoError(t, err)
	e := newApplyEnvTx(t, tx)
	res := e.batch(
		m("_set", `"x"`, `"_in":1000`),
		`{"_id":"$B","_path":["g"],"_value":{"_v":"boom"}}`,
		m("_set_with_history", `"y"`, `"_in":2000`),
		m("_inc", `"0|1|1"`),
		`{"_id":"$C","_path":["g"],"_value":{"_v":"c","_in":1000}}`,
	)
	require.Equal(t, []string{"ok", "dead_letter", "ok", "dead_letter", "ok"}, statuses(res))
	require.Equal(t, ptr("P0001"), res[1].SQLState)
	require.Equal(t, ptr("boom refused: a test trigger"), res[1].Reason)
	require.Equal(t, ptr("SPTYP"), res[3].SQLState)
	dl := e.deadLetter(*res[1].DeadLetterID)
	require.Equal(t, "P0001", dl.SQLState)
	require.Contains(t, dl.Context, "tg_refuse_boom")
	require.JSONEq(t, e.ids.Replace(`{"_id":"$B","_path":["g"],"_value":{"_v":"boom"}}`), dl.Message)
	require.Equal(t, []grainRow{gr("/g", `"x"`, 1000, hist()), gr("/g", `"y"`, 2000)}, e.grains("$A"))
	require.Empty(t, e.grains("$B"))
	require.Equal(t, []grainRow{gr("/g", `"c"`, 1000)}, e.grains("$C"))
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM profile.dead_letters`).Scan(&n))
	require.Equal(t, 2, n)
}

func TestProfileDeadLetterReplay(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	e.one(m("_set", `"x"`, `"_in":1000`))
	res := e.one(m("_array_append", `["y"]`, `"_in":2000`))
	require.Equal(t, "dead_letter", res.Status)
	id := *res.DeadLetterID

	// Still failing: the same dead letter is updated, no new one is written.
	count := func() int {
		var n int
		require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT count(*) FROM profile.dead_letters WHERE correlation_id = $1`, e.id("$A")).Scan(&n))
		return n
	}
	rep, err := e.q.ProfileDeadLetterReplay(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "dead_letter", rep.Status)
	require.Equal(t, ptr("SPTYP"), rep.SQLState)
	require.Equal(t, id, rep.DeadLetterID)
	require.Equal(t, 1, count())
	dl := e.deadLetter(id)
	require.Equal(t, int32(1), dl.ReplayCount)
	require.True(t, dl.Replayed)
	require.False(t, dl.Resolved)

	// Fixed: the replay applies and resolves it.
	e.one(m("_delete_with_history", `""`))
	rep, err = e.q.ProfileDeadLetterReplay(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, db.ProfileDeadLetterReplayRow{Status: "ok", Operation: ptr("_array_append"),
		CorrelationID: ptr(e.id("$A")), DeadLetterID: id}, rep)
	require.Equal(t, []grainRow{gr("/g", `["y"]`, 2000)}, e.grains("$A"))
	dl = e.deadLetter(id)
	require.True(t, dl.Resolved)
	require.Equal(t, int32(1), dl.ReplayCount)
	require.Equal(t, 1, count())

	// Resolved already; unknown.
	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ProfileDeadLetterReplay(e.ctx, id)
		return err
	})
	requireSQLState(t, err, "SLCNF")
	err = dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
		_, err := db.New(tx).ProfileDeadLetterReplay(e.ctx, -1)
		return err
	})
	requireSQLState(t, err, "SLNFD")

	// A message that can never apply stays dead, its reason refreshed.
	bad := e.one(`{"_id":"$A","_path":["g"],"_value":{"_v":"z","_c":2}}`)
	rep, err = e.q.ProfileDeadLetterReplay(e.ctx, *bad.DeadLetterID)
	require.NoError(t, err)
	require.Equal(t, ptr("SPCRT"), rep.SQLState)
	require.Equal(t, int32(1), e.deadLetter(*bad.DeadLetterID).ReplayCount)
}

func TestProfileDeadLetterList(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	res := e.batch(
		m("_set", `5`),
		m("_inc", `"x"`),
		`{"_id":"$B","_path":["g"],"_value":{"_v":5}}`,
		m("_set", `"x"`, `"_c":9`),
		m("_array_append", `"x"`),
	)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = *r.DeadLetterID
	}
	list := func(p db.ProfileDeadLetterListParams) []int64 {
		t.Helper()
		rows, err := e.q.ProfileDeadLetterList(e.ctx, p)
		require.NoError(t, err)
		out := []int64{}
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	a := ptr(e.id("$A"))
	require.Equal(t, []int64{ids[0], ids[1], ids[3], ids[4]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, MaxRows: 10}))
	require.Equal(t, []int64{ids[2]}, list(db.ProfileDeadLetterListParams{CorrelationID: ptr(e.id("$B")), MaxRows: 10}))
	// Keyset paging.
	require.Equal(t, []int64{ids[0], ids[1]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, MaxRows: 2}))
	require.Equal(t, []int64{ids[3], ids[4]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, AfterID: ids[1], MaxRows: 2}))
	require.Equal(t, []int64{}, list(db.ProfileDeadLetterListParams{CorrelationID: a, AfterID: ids[4], MaxRows: 2}))
	// Filters.
	require.Equal(t, []int64{ids[1]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, Operation: ptr("_inc"), MaxRows: 10}))
	require.Equal(t, []int64{ids[3]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, SQLState: ptr("SPCRT"), MaxRows: 5000}))
	require.Equal(t, []int64{ids[0], ids[1], ids[3], ids[4]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, ProfileType: ptr("_d"), Resolved: ptr(false), MaxRows: 10}))
	require.Equal(t, []int64{}, list(db.ProfileDeadLetterListParams{CorrelationID: a, Resolved: ptr(true), MaxRows: 10}))
	_, err := e.tx.Exec(e.ctx, `UPDATE profile.dead_letters SET resolved = now() WHERE id = $1`, ids[4])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[4]}, list(db.ProfileDeadLetterListParams{CorrelationID: a, Resolved: ptr(true), MaxRows: 10}))
	require.Equal(t, []int64{}, list(db.ProfileDeadLetterListParams{CorrelationID: a, MaxRows: 0}))
}

// Applying a batch gives exactly what applying its updates one by one gives: random batches of
// every operation over a few grains and profiles (so updates collide, links come and go and
// history pits clash), compared row by row and result by result.
func TestProfileApplyBatchEquivalence(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	rng := rand.New(rand.NewSource(20261122))
	names := []string{"$A", "$B", "$C"}
	seen := map[string]int{}
	for round := 0; round < 25; round++ {
		msgs := make([]string, 1+rng.Intn(40))
		for i := range msgs {
			msgs[i] = randomUpdate(rng, names)
		}
		batchJSON := json.RawMessage(e.ids.Replace("[" + strings.Join(msgs, ",") + "]"))

		batchRows, batchState := e.applyRolledBack(batchJSON, names)

		var oneRows []db.ProfileApplyBatchRow
		require.NoError(t, dbtest.Savepoint(t, e.tx, func(tx pgx.Tx) error {
			for _, msg := range msgs {
				r, err := db.New(tx).ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(e.ids.Replace("[" + msg + "]"))})
				require.NoError(t, err)
				require.Len(t, r, 1)
				r[0].Ord = int32(len(oneRows) + 1)
				oneRows = append(oneRows, r[0])
			}
			require.Equal(t, batchState, e.state(tx, names), "round %d: %s", round, batchJSON)
			return nil
		}))
		require.Equal(t, len(oneRows), len(batchRows))
		for i := range oneRows {
			o, b := oneRows[i], batchRows[i]
			o.DeadLetterID, b.DeadLetterID = nil, nil
			require.Equal(t, o, b, "round %d, update %d: %s", round, i+1, msgs[i])
			seen[b.Status]++
			if b.SQLState != nil {
				seen[*b.SQLState]++
			}
		}
	}
	// The random batches exercise every outcome, grain type clashes and link cycles included.
	for _, k := range []string{"ok", "noop", "dead_letter", "SPTYP", "SPLNK", "SPMSG"} {
		require.Positive(t, seen[k], "no %s in %v", k, seen)
	}
}

// applyRolledBack applies a batch in a savepoint that it rolls back, and returns the results and
// the profiles' rows as the batch left them.
func (e *applyEnv) applyRolledBack(batch json.RawMessage, names []string) ([]db.ProfileApplyBatchRow, string) {
	e.t.Helper()
	var rows []db.ProfileApplyBatchRow
	var state string
	require.Error(e.t, dbtest.Savepoint(e.t, e.tx, func(tx pgx.Tx) error {
		var err error
		rows, err = db.New(tx).ProfileApplyBatch(e.ctx, db.ProfileApplyBatchParams{Updates: batch})
		require.NoError(e.t, err)
		state = e.state(tx, names)
		return errors.New("roll the batch back")
	}))
	return rows, state
}

// state is every row of the profiles, as text. Times that come from the default _in (the moment a
// call applies its batch, so they differ between a batch and the same updates one call each) read
// "now": insertion times, history pits and due times of the last day.
func (e *applyEnv) state(tx pgx.Tx, names []string) string {
	ids := make([]string, len(names))
	for i, n := range names {
		ids[i] = e.id(n)
	}
	var s string
	require.NoError(e.t, tx.QueryRow(e.ctx, `
		WITH r AS (
		    SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s', p.correlation_id, p.profile_type, p.path,
		                  CASE WHEN p.pit <> '_latest' AND p.pit >= h.pit THEN '_now' ELSE p.pit END,
		                  p.value, p.certainty, p.grain_type,
		                  CASE WHEN p.inserted >= h.ms THEN 'now' ELSE p.inserted::text END,
		                  p.ttl, p.reader, p.origin, p.ttn,
		                  CASE WHEN p.expires_at >= h.at THEN 'now+' ELSE p.expires_at::text END,
		                  CASE WHEN p.notify_at >= h.at THEN 'now+' ELSE p.notify_at::text END) AS line
		    FROM profile.profilestore p,
		         (SELECT now() - interval '1 day' AS at,
		                 floor(extract(epoch FROM now() - interval '1 day') * 1000)::bigint AS ms,
		                 '_' || to_char((now() - interval '1 day') AT TIME ZONE 'UTC', 'YYYYMMDD') AS pit) h
		    WHERE p.correlation_id = ANY ($1))
		SELECT coalesce(string_agg(r.line, E'\n' ORDER BY r.line COLLATE "C"), '') FROM r`, ids).Scan(&s))
	return s
}

var randomOps = []string{"_set", "_set_if_not_exist", "_set_with_history", "_set_with_history_distinct", "_set_max",
	"_set_min", "_set_max_with_history", "_set_min_with_history", "_delete", "_delete_with_history", "_inc",
	"_array_append", "_array_append_with_history", "_array_put", "_array_put_with_history",
	"_array_put_with_history_distinct", "_array_remove", "_array_remove_with_history", "_set_ttl", "_set_ttn",
	"_profile_link"}

func randomUpdate(rng *rand.Rand, names []string) string {
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	op := randomOps[rng.Intn(len(randomOps))]
	id := names[rng.Intn(len(names))]
	if rng.Intn(30) == 0 {
		return pick(`5`, `{"_id":"`+id+`"}`, `{"_id":"","_path":["p"],"_value":{"_v":"x"}}`)
	}
	str := func() string { return pick(`"a"`, `"b"`, `"c"`, `"9"`, `"10"`, `"2020-01-01"`) }
	arr := func() string { return pick(`[]`, `["a"]`, `["b","a"]`, `["a","a","c"]`, `["c"]`) }
	var v string
	switch op {
	case "_inc":
		v = pick(`"0|1|1"`, `"10|0.5|-1"`, `"1|2|3"`, `"x"`)
	case "_array_append", "_array_append_with_history", "_array_put", "_array_put_with_history", "_array_put_with_history_distinct":
		v = arr()
	case "_array_remove", "_array_remove_with_history", "_set_max", "_set_min", "_set_max_with_history", "_set_min_with_history":
		v = str()
	case "_delete":
		v = pick(`""`, `[""]`, `[]`, `["`+pitOf(1000)+`"]`, `["`+pitOf(1001)+`",""]`)
	case "_delete_with_history":
		v = `""`
	case "_set_ttl", "_set_ttn":
		v = pick(`""`, `[""]`, `"P1D"`, `["`+pitOf(1000)+`"]`)
	case "_profile_link":
		v = `"` + names[rng.Intn(len(names))] + `"`
	default:
		if rng.Intn(2) == 0 {
			v = str()
		} else {
			v = arr()
		}
	}
	meta := ""
	switch rng.Intn(4) {
	case 0:
		meta = `,"_in":` + pick("1000", "1001", "2000", `"1970-01-01T00:00:01Z"`)
	case 1:
		meta = `,"_in":1000,"_c":0.5,"_ttl":"PT1H","_ttn":"P1D","_origin":"o","_reader":"r"`
	case 2:
		meta = `,"_ttl":"P1D"`
	}
	pt := pick(`"_d"`, `"_d"`, `"t2"`, `"profile_link"`)
	if pt == `"profile_link"` && op != "_delete" && op != "_set_ttl" {
		pt = `"_d"`
	}
	path := pick(`["p"]`, `["q"]`, `["p","r"]`)
	if pt == `"profile_link"` {
		path = `["new"]`
	}
	return `{"_operation":"` + op + `","_id":"` + id + `","_profile_type":` + pt + `,"_path":` + path +
		`,"_value":{"_v":` + v + meta + `}}`
}

// Plain updates (the usual shapes) are validated by a short query, the others by the full one:
// both give the same results and rows. Each random batch of plain-shaped updates is applied as
// it is, then with "_origin": null added to every _value, which changes nothing but sends every
// update through the full validation.
func TestProfileApplyPlainAndFullValidationAgree(t *testing.T) {
	t.Parallel()
	e := newApplyEnv(t)
	rng := rand.New(rand.NewSource(20261125))
	names := []string{"$A", "$B"}
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	ops := []string{"_set", "_set_if_not_exist", "_set_with_history", "_set_with_history_distinct", "_set_max",
		"_set_min", "_set_max_with_history", "_set_min_with_history", "_inc", "_array_append",
		"_array_append_with_history", "_array_put", "_array_put_with_history", "_array_put_with_history_distinct",
		"_array_remove", "_array_remove_with_history"}
	apply := func(msgs []string, meta string) ([]db.ProfileApplyBatchRow, string) {
		rows, state := e.applyRolledBack(json.RawMessage(e.ids.Replace("["+strings.ReplaceAll(strings.Join(msgs, ","), "META", meta)+"]")), names)
		for i := range rows {
			rows[i].DeadLetterID = nil
		}
		return rows, state
	}
	seen := map[string]int{}
	for round := 0; round < 30; round++ {
		msgs := make([]string, 1+rng.Intn(30))
		for i := range msgs {
			op := ops[rng.Intn(len(ops))]
			var v string
			switch {
			case op == "_inc":
				v = pick(`"0|1|1"`, `"10|0.5|-1"`, `"1e2|2|3"`, `"x"`)
			case strings.HasPrefix(op, "_array_remove") || strings.HasPrefix(op, "_set_m"):
				v = pick(`"5"`, `"12"`, `"b"`, `"2021-01-02"`, `["x"]`)
			case strings.HasPrefix(op, "_array"):
				v = pick(`["a"]`, `["a","b","a"]`, `[]`, `["c",1]`, `"a"`)
			default:
				v = pick(`"x"`, `"y"`, `["a","b"]`, `[]`, `5`, `null`)
			}
			c := pick(``, `,"_c":0.5`, `,"_c":1`, `,"_c":0`, `,"_c":1e-40`, `,"_c":null`, `,"_c":2`)
			pt := pick(``, `,"_profile_type":"_d"`, `,"_profile_type":"t2"`, `,"_profile_type":null`)
			path := pick(`["p"]`, `["q"]`, `["p","r"]`, `["p r","é"]`)
			opField := `"_operation":"` + op + `",`
			if op == "_set" && rng.Intn(3) == 0 {
				opField = pick(``, `"_operation":null,`)
			}
			msgs[i] = `{` + opField + `"_id":"` + names[rng.Intn(len(names))] + `"` + pt + `,"_path":` + path +
				`,"_value":{"_v":` + v + c + `META}}`
		}
		plainRows, plainState := apply(msgs, "")
		fullRows, fullState := apply(msgs, `,"_origin":null`)
		require.Equal(t, fullState, plainState, "round %d: %v", round, msgs)
		require.Equal(t, fullRows, plainRows, "round %d: %v", round, msgs)
		for _, r := range plainRows {
			seen[r.Status]++
		}
	}
	for _, k := range []string{"ok", "noop", "dead_letter"} {
		require.Positive(t, seen[k], "no %s in %v", k, seen)
	}
}
