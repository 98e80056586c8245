package db_test

// Tests of the helpers SQL callbacks build their updates with (sql/belt/03_helpers.sql): the shape
// of Granary's Update messages, the set_value overloads and its _in rule, and that the profile
// store applies what they build.

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestBeltHelpersBuildGranaryUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	for _, tc := range []struct{ expr, want string }{
		{`api.update('c1', '{a,b}')`,
			`{"_schema": null, "_operation": "_set", "_id": "c1", "_path": ["a", "b"], "_profile_type": "_d"}`},
		{`api.update('c1', '{a}', '_array_append', 'customer')`,
			`{"_schema": null, "_operation": "_array_append", "_id": "c1", "_path": ["a"], "_profile_type": "customer"}`},
		{`api.update('c1', '{a}', NULL, NULL)`,
			`{"_schema": null, "_operation": "_set", "_id": "c1", "_path": ["a"], "_profile_type": "_d"}`},
		// set_value(u, 'x'): text; only what is given.
		{`api.set_value(api.update('c1', '{a}'), 'x')`,
			`{"_schema": null, "_operation": "_set", "_id": "c1", "_path": ["a"], "_profile_type": "_d", "_value": {"_v": "x"}}`},
		// set_value(u, to_jsonb(42)): any JSON.
		{`api.set_value(api.update('c1', '{a}'), to_jsonb(42)) -> '_value'`, `{"_v": 42}`},
		{`api.set_value(api.update('c1', '{a}'), '["x", "y"]'::jsonb) -> '_value'`, `{"_v": ["x", "y"]}`},
		// All of them, positionally as in Python: value, certainty, _in, ttl, origin, reader.
		{`api.set_value(api.update('c1', '{a}'), 'Hello Belt!', 0.5, 1700000000123, 'P1D', 'Dummy-Belt', '_all') -> '_value'`,
			`{"_v": "Hello Belt!", "_c": 0.5, "_in": 1700000000123, "_ttl": "P1D", "_origin": "Dummy-Belt", "_reader": "_all"}`},
		// By name.
		{`api.set_value(api.update('c1', '{a}'), 'x', p_reader => '_pers') -> '_value'`, `{"_v": "x", "_reader": "_pers"}`},
		// _in: seconds as Python's time() gives them become milliseconds; milliseconds stay.
		{`api.set_value(api.update('c1', '{a}'), 'x', p_in => 1700000000.1234) -> '_value' -> '_in'`, `1700000000123`},
		{`api.set_value(api.update('c1', '{a}'), 'x', p_in => 1700000000) -> '_value' -> '_in'`, `1700000000000`},
		{`api.set_value(api.update('c1', '{a}'), 'x', p_in => 99999999999) -> '_value' -> '_in'`, `99999999999000`},
		{`api.set_value(api.update('c1', '{a}'), 'x', p_in => 100000000000) -> '_value' -> '_in'`, `100000000000`},
		{`api.set_value(api.update('c1', '{a}'), 'x', p_in => 1700000000123.6) -> '_value' -> '_in'`, `1700000000124`},
		{`api.set_value(api.update('c1', '{a}'), 'x', p_in => extract(epoch FROM timestamptz '2024-01-02 03:04:05.678+00')) -> '_value' -> '_in'`, `1704164645678`},
		// A second set_value replaces the value.
		{`api.set_value(api.set_value(api.update('c1', '{a}'), 'x', 0.2), 'y') -> '_value'`, `{"_v": "y"}`},
		// Edges the builders keep: NULL id and path, an empty path, a NULL segment, characters
		// that JSON escapes, a NULL value, and an update that is not an object (|| semantics).
		{`api.update(NULL, NULL)`,
			`{"_schema": null, "_operation": "_set", "_id": null, "_path": null, "_profile_type": "_d"}`},
		{`api.update('a"b\', '{}', '_inc', 'pt')`,
			`{"_schema": null, "_operation": "_inc", "_id": "a\"b\\", "_path": [], "_profile_type": "pt"}`},
		{`api.update('', '{"a b",NULL}') -> '_path'`, `["a b", null]`},
		{`api.set_value(api.update('c1', '{a}'), 'é"' || chr(10)) -> '_value'`, `{"_v": "é\"\n"}`},
		{`api.set_value(api.update('c1', '{a}'), NULL::text) -> '_value'`, `{"_v": null}`},
		{`api.set_value(api.update('c1', '{a}'), NULL::jsonb) -> '_value'`, `{"_v": null}`},
		{`api.set_value('[1]', 'x')`, `[1, {"_value": {"_v": "x"}}]`},
		{`coalesce(api.set_value(NULL, 'x'), '"none"')`, `"none"`},
		{`api.set_type(api.update('c1', '{a}'), 'TestProfileType') -> '_profile_type'`, `"TestProfileType"`},
		{`api.set_operation(api.update('c1', '{a}'), '_set_with_history') -> '_operation'`, `"_set_with_history"`},
		{`api.set_schema(api.update('c1', '{a}'), 'iglu:x/y/1-0-0') -> '_schema'`, `"iglu:x/y/1-0-0"`},
	} {
		var got string
		require.NoError(t, tx.QueryRow(ctx, "SELECT ("+tc.expr+")::text").Scan(&got), tc.expr)
		require.JSONEq(t, tc.want, got, tc.expr)
	}
}

// What the helpers build, the profile store applies: the seed's simple callback in SQL, and the
// array-append update of the batch example.
func TestBeltHelpersOutputIsApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	cid := "helpers-" + t.Name()
	var updates json.RawMessage
	require.NoError(t, tx.QueryRow(ctx, `
		SELECT jsonb_build_array(
			api.set_operation(api.set_type(api.set_value(api.update($1, '{dummy}'), 'Hello Belt!', 0.5,
				extract(epoch FROM now()), 'P1D', 'Dummy-Belt'), 'TestProfileType'), '_set'),
			api.set_value(api.update($1, '{visits}', '_inc'), '0|1|3', p_reader => '_all'),
			api.set_value(api.update($1, '{age}'), 42::text),
			api.set_value(api.update($1, '{pages}', '_array_append'), to_jsonb(ARRAY['home']), p_origin => '/belts/7'),
			api.set_schema(api.set_value(api.update($1, '{seen}'), 'yes', 1, 1700000000123, p_reader => '_pers'), 'iglu:x/y/1-0-0'))`,
		cid).Scan(&updates))
	res, err := q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: updates})
	require.NoError(t, err)
	require.Len(t, res, 5)
	for i, r := range res {
		if r.Status != "ok" {
			t.Fatalf("update %d: %s %s %s", i, r.Status, deref(r.SQLState), deref(r.Reason))
		}
	}
	type grain struct{ typ, path, value, origin, reader string }
	var got []grain
	rows, err := tx.Query(ctx, `
		SELECT profile_type, path, value::text, coalesce(origin, ''), reader FROM profile.profilestore
		WHERE correlation_id = $1 AND pit = '_latest' ORDER BY profile_type, path`, cid)
	require.NoError(t, err)
	for rows.Next() {
		var g grain
		require.NoError(t, rows.Scan(&g.typ, &g.path, &g.value, &g.origin, &g.reader))
		got = append(got, g)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []grain{
		{"TestProfileType", "/dummy", `"Hello Belt!"`, "Dummy-Belt", "_auth"},
		{"_d", "/age", `"42"`, "", "_auth"},
		{"_d", "/pages", `["home"]`, "/belts/7", "_auth"},
		{"_d", "/seen", `"yes"`, "", "_pers"},
		{"_d", "/visits", `{"_step": 1, "_current": 3, "_initial": 0}`, "", "_all"},
	}, got, fmt.Sprint(got))
}

func TestBeltRetryRaisesSBRTY(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	for _, tc := range []struct{ expr, msg string }{
		{`api.belt_retry('profile not there yet')`, "profile not there yet"},
		{`api.belt_retry()`, "retry requested"},
		{`api.belt_retry(NULL)`, "retry requested"},
	} {
		err := e.fails(func(q *db.Queries) error {
			_, err := e.tx.Exec(e.ctx, "SELECT "+tc.expr)
			return err
		})
		require.Equal(t, "SBRTY", err.Code, tc.expr)
		require.Equal(t, tc.msg, err.Message, tc.expr)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
