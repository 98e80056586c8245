package db_test

// Tests of the Python belt runtime (sql/belt/07_python_*.sql): belt_private.python_check and
// belt_private.python_run, run by PL/Python. The callbacks in testdata/belt_python/ are Granary's
// examples as published (the seed's and the belt callback signatures reference's). Every test
// skips where the server has no plpython3u (the functions do not exist there), except the one
// that checks they are absent then.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
	apisql "github.com/silo-db/silo/sql"
)

// pyQuerier is a transaction or a connection.
type pyQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// requirePython skips the test where the database has no Python runtime.
func requirePython(t *testing.T, q pyQuerier) {
	t.Helper()
	var ok bool
	require.NoError(t, q.QueryRow(context.Background(),
		`SELECT to_regprocedure('belt_private.python_run(bigint,integer,text,jsonb,jsonb)') IS NOT NULL`).Scan(&ok))
	if !ok {
		t.Skip("the server has no plpython3u (Debian package postgresql-plpython3-<version>): no Python runtime to test")
	}
}

func pyTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/belt_python/" + name)
	require.NoError(t, err)
	return string(b)
}

// pyCheck returns python_check's reason, "" when the source validates.
func pyCheck(t *testing.T, q pyQuerier, src, mode string) string {
	t.Helper()
	var reason *string
	require.NoError(t, q.QueryRow(context.Background(), `SELECT belt_private.python_check($1, $2)`, src, mode).Scan(&reason))
	if reason == nil {
		return ""
	}
	return *reason
}

// pyResult is one element of python_run's result.
type pyResult struct {
	Updates     []map[string]any `json:"updates"`
	Skipped     int              `json:"skipped"`
	Retry       *string          `json:"retry"`
	Timeout     *string          `json:"timeout"`
	Error       *string          `json:"error"`
	Traceback   *string          `json:"traceback"`
	MS          *float64         `json:"ms"`
	LongRunning *bool            `json:"longRunning"`
}

func (r pyResult) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// pyEvent is an event as python_run takes it.
func pyEvent(id, cid string, payload any) map[string]any {
	return map[string]any{
		"headers": map[string]any{"grnry-event-id": id, "grnry-correlation-id": cid, "grnry-event-type": "t"},
		"payload": payload,
	}
}

func pyRun(t *testing.T, q pyQuerier, belt int64, version int, src string, settings map[string]any, events []map[string]any) []pyResult {
	t.Helper()
	s, err := json.Marshal(settings)
	require.NoError(t, err)
	e, err := json.Marshal(events)
	require.NoError(t, err)
	var raw []byte
	require.NoError(t, q.QueryRow(context.Background(),
		`SELECT belt_private.python_run($1, $2, $3, $4::jsonb, $5::jsonb)`, belt, version, src, string(s), string(e)).Scan(&raw))
	var out []pyResult
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	require.Len(t, out, len(events), "%s", raw)
	for i, r := range out {
		require.NotNil(t, r.MS, "result %d has no ms: %s", i, r)
		require.NotNil(t, r.LongRunning, "result %d has no longRunning: %s", i, r)
	}
	return out
}

var pyFalse = map[string]any{"fetchProfile": "FALSE"}

// pyBeltIDs gives each test its own belt ids, so that no test meets another's cached module.
var pyBeltIDs struct {
	sync.Mutex
	next int64
}

func pyBelt() int64 {
	pyBeltIDs.Lock()
	defer pyBeltIDs.Unlock()
	pyBeltIDs.next++
	return 1_000_000 + int64(os.Getpid())%1000*1000 + pyBeltIDs.next
}

// Granary's validation rules, one case each, and the reasons for sources that do not load.
func TestBeltPythonCheck(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	cases := []struct {
		name, src, mode, reason string // reason: a part of the expected reason, "" valid
	}{
		{"two parameters, false", "def execute(h, p):\n    return None\n", "false", ""},
		{"two parameters, lazy", "def execute(h, p):\n    return None\n", "LAZY", ""},
		{"third with default, false", "def execute(h, p, profile=None):\n    return None\n", "FALSE", ""},
		{"third with default, lazy", "def execute(h, p, profile=None):\n    return None\n", "lazy", ""},
		{"three parameters, true", "def execute(h, p, profile):\n    return None\n", "true", ""},
		{"third with default, true", "def execute(h, p, profile=None):\n    return None\n", "TRUE", ""},
		{"mode NULL is false", "def execute(h, p):\n    return None\n", "", ""},
		{"no execute", "def run(h, p):\n    return None\n", "false", "A method called execute needs to be present"},
		{"execute not callable", "execute = 5\n", "false", "execute is not a function"},
		{"one parameter", "def execute(h):\n    return None\n", "false", "can only have 2 or 3 parameters, it has 1"},
		{"four parameters", "def execute(h, p, a=1, b=2):\n    return None\n", "false", "can only have 2 or 3 parameters, it has 4"},
		{"no parameter", "def execute():\n    return None\n", "true", "can only have 2 or 3 parameters, it has 0"},
		{"third without default, false", "def execute(h, p, profile):\n    return None\n", "false", "With FETCH_PROFILE false the third parameter of the execute method needs a default"},
		{"third without default, lazy", "def execute(h, p, profile):\n    return None\n", "lazy", "With FETCH_PROFILE lazy the third parameter of the execute method needs a default"},
		{"two parameters, true", "def execute(h, p):\n    return None\n", "true", "With FETCH_PROFILE true the execute method needs exactly 3 parameters"},
		{"keyword-only parameter", "def execute(h, *, p):\n    return None\n", "false", "execute cannot be called with 2 arguments"},
		{"syntax error", "def execute(h, p)\n    return None\n", "false", "SyntaxError: expected ':' (line 1)"},
		{"exception at import", "import json\nraise ValueError('no config')\ndef execute(h, p):\n    return None\n", "false", "executing the callback module raised ValueError: no config"},
		{"missing module", "import no_such_module_here\ndef execute(h, p):\n    return None\n", "false", "ModuleNotFoundError: No module named 'no_such_module_here'"},
		{"empty source", "  \n", "false", "the callback source is empty"},
		{"unknown mode", "def execute(h, p):\n    return None\n", "sometimes", "FETCH_PROFILE must be false, true or lazy"},
		{"seed's simple example, true", pyTestdata(t, "seed_simple.py"), "TRUE", ""},
		{"seed's retry example, false", pyTestdata(t, "seed_retry.py"), "FALSE", ""},
		{"reference single payload example", pyTestdata(t, "reference_single.py"), "FALSE", ""},
		// The reference's list-signature examples are not valid Python as published.
		{"reference multiple payloads example", pyTestdata(t, "reference_multiple.py"), "FALSE", "IndentationError: unexpected indent (line 10)"},
		{"reference mixed payloads example", pyTestdata(t, "reference_mixed.py"), "FALSE", "IndentationError: unindent does not match any outer indentation level (line 11)"},
	}
	for _, c := range cases {
		reason := pyCheck(t, tx, c.src, c.mode)
		if c.reason == "" {
			require.Empty(t, reason, c.name)
		} else {
			require.Contains(t, reason, c.reason, c.name)
		}
	}
	// The mode NULL too.
	var reason *string
	require.NoError(t, tx.QueryRow(context.Background(), `SELECT belt_private.python_check('def execute(h, p): pass', NULL)`).Scan(&reason))
	require.Nil(t, reason)
}

// The seed's simple callback example, unchanged, with FETCH_PROFILE true: its update, accepted by
// the profile store once the processing step fills _origin (the example sets one itself).
func TestBeltPythonSeedExample(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	cid := fmt.Sprintf("py-seed-%d", time.Now().UnixNano())
	ev := pyEvent("e1", cid, map[string]any{"body": "{}"})
	ev["profile"] = map[string]any{"correlationId": cid, "type": "_d", "jsonPayload": map[string]any{"_id": cid}}
	before := time.Now().UnixMilli()
	out := pyRun(t, tx, pyBelt(), 1, pyTestdata(t, "seed_simple.py"), map[string]any{"fetchProfile": "TRUE"}, []map[string]any{ev})
	after := time.Now().UnixMilli()
	require.Nil(t, out[0].Error, "%s", out[0])
	require.Len(t, out[0].Updates, 1)
	u := out[0].Updates[0]
	value := u["_value"].(map[string]any)
	in := int64(value["_in"].(float64))
	require.GreaterOrEqual(t, in, before-1, "time() in seconds became epoch milliseconds")
	require.LessOrEqual(t, in, after+1)
	delete(value, "_in")
	require.Equal(t, map[string]any{
		"_schema": nil, "_operation": "_set", "_id": cid, "_profile_type": "TestProfileType", "_path": []any{"dummy"},
		"_value": map[string]any{"_v": "Hello Belt!", "_c": 0.5, "_ttl": "P1D", "_origin": "Dummy-Belt"},
	}, u)

	b, err := json.Marshal([]map[string]any{out[0].Updates[0]})
	require.NoError(t, err)
	var status string
	var reason *string
	require.NoError(t, tx.QueryRow(ctx, `SELECT status, reason FROM api.profile_apply_batch($1::jsonb)`, string(b)).Scan(&status, &reason))
	require.Equal(t, "ok", status, "%v", reason)
}

// The reference's single payload example, unchanged: set_value(value=..., reader=...),
// set_operation and set_type from the event's body; the updates go to the store.
func TestBeltPythonReferenceExample(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	cid := fmt.Sprintf("py-ref-%d", time.Now().UnixNano())
	body := map[string]any{
		"integration_test_data": true,
		"data":                  []any{map[string]any{"correlationId": cid, "filterCriteria": "a"}},
		"simple_pairs": []any{
			map[string]any{"type": "_d", "value": "hallo", "reader": "_auth", "path": "grain-1"},
			map[string]any{"type": "_d", "value": "welt", "reader": "", "path": "a/b", "operation": "_set_with_history"},
		},
	}
	bodyText, err := json.Marshal(body)
	require.NoError(t, err)
	src := pyTestdata(t, "reference_single.py")
	out := pyRun(t, tx, pyBelt(), 1, src, pyFalse, []map[string]any{
		pyEvent("e1", cid, map[string]any{"body": string(bodyText), "encoding": "UTF-8"}),
		pyEvent("e2", cid, map[string]any{"encoding": "UTF-8"}), // no body: None
	})
	require.Nil(t, out[0].Error, "%s", out[0])
	require.Equal(t, []map[string]any{
		{"_schema": nil, "_operation": "_set", "_id": cid, "_profile_type": "_d", "_path": []any{"grain-1"},
			"_value": map[string]any{"_v": "hallo", "_reader": "_auth"}},
		{"_schema": nil, "_operation": "_set_with_history", "_id": cid, "_profile_type": "_d", "_path": []any{"a", "b"},
			"_value": map[string]any{"_v": "welt", "_reader": "_all"}},
	}, out[0].Updates)
	require.Nil(t, out[1].Error, "%s", out[1])
	require.Empty(t, out[1].Updates)

	b, err := json.Marshal(out[0].Updates)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT status FROM api.profile_apply_batch($1::jsonb)`, string(b))
	require.NoError(t, err)
	statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"ok", "ok"}, statuses)
}

// The list-signature examples call helpers like the reference's create_update per event:
// Update(id, path, operation=...), set_value with keywords, calling an update for its dict; the
// mixed example's single-payload branch (a dict of headers) is what Silo calls.
func TestBeltPythonUpdateForms(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	src := `
import json
import logging
import datetime
from grnry.beltextractor.update import Update as ImportedUpdate
from grnry_belt.update import Update as BeltUpdate

def create_update(correlation_id, path, value):
   update=Update(correlation_id, path, operation='_array_append');
   update.set_value(value=value, origin='integration-test', reader='_all')
   update.set_type('toe-436-test')
   return update

def execute(event_headers, event_payload, profile=None):
    if not event_headers:
      return None
    if not isinstance(event_headers, dict):
      raise ValueError("event_headers and/or event_payload do not match the expected signature")
    cid = event_headers['grnry-correlation-id']
    kind = event_payload['kind']
    if kind == 'append':
        updates = [create_update(cid, ['a', 'b'], ['x'])]
        logging.debug(updates[0]())
        return updates
    if kind == 'positional':
        u = Update(cid, ['p'])
        u.set_value('v', 0.25, 1700000000123, 'P2D', 'o', 'r')
        return [u]
    if kind == 'seconds':
        return [Update(cid, ['s']).set_value('v', _in=1700000000.5)]
    if kind == 'millis float':
        return [Update(cid, ['s']).set_value('v', _in=1700000000123.4)]
    if kind == 'iso':
        return [Update(cid, ['s']).set_value('v', _in='2024-01-02')]
    if kind == 'datetime':
        return [Update(cid, ['s']).set_value('v', _in=datetime.datetime(2024, 1, 2, 3, 4, 5, 678000))]
    if kind == 'keywords':
        u = Update(cid, ['k'])
        u.set_value(value='v', certainty=1, _in=None, ttl='P1Y', origin=None, reader='_all', ttn='P1M')
        u.set_schema('iglu:x/1-0-0')
        u.set_operation('_set_with_history')
        return [u]
    if kind == 'none value':
        u = Update(cid, ['n'])
        u.set_value(None)
        return [u]
    if kind == 'no value':
        return [Update(cid, ['n'])]
    if kind == 'imports':
        return [ImportedUpdate(cid, ['i']).set_value('1'), BeltUpdate(cid, ['j']).set_value('2')]
    if kind == 'call':
        u = Update(cid, ['c']).set_value('v')
        return [Update(cid, ['d']).set_value(json.dumps(u()))]
`
	kinds := []string{"append", "positional", "seconds", "millis float", "iso", "datetime", "keywords", "none value", "no value", "imports", "call"}
	var events []map[string]any
	for i, k := range kinds {
		events = append(events, pyEvent(fmt.Sprint("e", i), "c1", map[string]any{"kind": k}))
	}
	events = append(events, map[string]any{"headers": map[string]any{}, "payload": nil})
	require.Empty(t, pyCheck(t, tx, src, "FALSE"))
	out := pyRun(t, tx, pyBelt(), 1, src, pyFalse, events)
	for i, r := range out {
		require.Nil(t, r.Error, "%s: %s", append(kinds, "empty headers")[i], r)
	}
	base := func(path []any, op string, value map[string]any) map[string]any {
		u := map[string]any{"_schema": nil, "_operation": op, "_id": "c1", "_profile_type": "_d", "_path": path}
		if value != nil {
			u["_value"] = value
		}
		return u
	}
	append1 := base([]any{"a", "b"}, "_array_append", map[string]any{"_v": []any{"x"}, "_origin": "integration-test", "_reader": "_all"})
	append1["_profile_type"] = "toe-436-test"
	require.Equal(t, []map[string]any{append1}, out[0].Updates)
	require.Equal(t, []map[string]any{base([]any{"p"}, "_set", map[string]any{
		"_v": "v", "_c": 0.25, "_in": float64(1700000000123), "_ttl": "P2D", "_origin": "o", "_reader": "r"})}, out[1].Updates)
	require.Equal(t, float64(1700000000500), out[2].Updates[0]["_value"].(map[string]any)["_in"], "seconds below 1e11 are made milliseconds")
	require.Equal(t, float64(1700000000123), out[3].Updates[0]["_value"].(map[string]any)["_in"], "milliseconds are made whole")
	require.Equal(t, "2024-01-02", out[4].Updates[0]["_value"].(map[string]any)["_in"], "a string goes as it is")
	require.Equal(t, float64(time.Date(2024, 1, 2, 3, 4, 5, 678e6, time.UTC).UnixMilli()), out[5].Updates[0]["_value"].(map[string]any)["_in"])
	keywords := base([]any{"k"}, "_set_with_history", map[string]any{"_v": "v", "_c": float64(1), "_ttl": "P1Y", "_ttn": "P1M", "_reader": "_all"})
	keywords["_schema"] = "iglu:x/1-0-0"
	require.Equal(t, []map[string]any{keywords}, out[6].Updates)
	require.Equal(t, []map[string]any{base([]any{"n"}, "_set", map[string]any{"_v": nil})}, out[7].Updates, "a value of None is kept: the store rejects it")
	require.Equal(t, []map[string]any{base([]any{"n"}, "_set", nil)}, out[8].Updates, "no set_value: no _value")
	require.Equal(t, []map[string]any{base([]any{"i"}, "_set", map[string]any{"_v": "1"}), base([]any{"j"}, "_set", map[string]any{"_v": "2"})}, out[9].Updates)
	var called map[string]any
	require.NoError(t, json.Unmarshal([]byte(out[10].Updates[0]["_value"].(map[string]any)["_v"].(string)), &called))
	require.Equal(t, base([]any{"c"}, "_set", map[string]any{"_v": "v"}), called, "calling an update returns its message")
	require.Empty(t, out[11].Updates, "no headers: None")
}

// FETCH_PROFILE false, true and lazy: what execute receives, and profileClient.getProfile.
func TestBeltPythonFetchProfile(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	cid := fmt.Sprintf("py-lazy-%d", time.Now().UnixNano())
	_, err := tx.Exec(ctx, `SELECT * FROM api.profile_apply_batch($1::jsonb)`, fmt.Sprintf(`[
		{"_id": %[1]q, "_path": ["customer", "name"], "_value": {"_v": "Ada"}},
		{"_id": %[1]q, "_path": ["invoice"], "_value": {"_v": "42"}},
		{"_id": %[1]q, "_profile_type": "other", "_path": ["x"], "_value": {"_v": "o"}}]`, cid))
	require.NoError(t, err)

	// false: two arguments; a third parameter keeps its default.
	src := "import json\ndef execute(h, p, profile='default'):\n    return [Update(h['grnry-correlation-id'], ['g']).set_value(json.dumps(profile))]\n"
	out := pyRun(t, tx, pyBelt(), 1, src, pyFalse, []map[string]any{pyEvent("e1", cid, nil)})
	require.Equal(t, `"default"`, out[0].Updates[0]["_value"].(map[string]any)["_v"])

	// true: the event's profile is the third argument (None when the event has none).
	ev := pyEvent("e1", cid, nil)
	ev["profile"] = map[string]any{"correlationId": cid, "type": "_d", "jsonPayload": map[string]any{"_id": cid, "k": 1}}
	out = pyRun(t, tx, pyBelt(), 1, src, map[string]any{"fetchProfile": "TRUE"}, []map[string]any{ev, pyEvent("e2", cid, nil)})
	got, err := json.Marshal(ev["profile"])
	require.NoError(t, err)
	require.JSONEq(t, string(got), out[0].Updates[0]["_value"].(map[string]any)["_v"].(string))
	require.Equal(t, "null", out[1].Updates[0]["_value"].(map[string]any)["_v"])

	// true with a two-parameter execute: every event fails validation.
	out = pyRun(t, tx, pyBelt(), 1, "def execute(h, p):\n    return None\n", map[string]any{"fetchProfile": "TRUE"}, []map[string]any{ev, ev})
	for _, r := range out {
		require.NotNil(t, r.Error)
		require.Contains(t, *r.Error, "InvalidCallback: With FETCH_PROFILE true the execute method needs exactly 3 parameters")
	}

	// lazy: profileClient in the module's globals, its profile type PROFILE_TYPE by default.
	lazy := `
import json
def execute(event_headers, event_payload, profile=None):
    cid = event_headers['grnry-correlation-id']
    kind = event_payload
    if kind == 'whole':
        p = profileClient.getProfile(cid)
    elif kind == 'fragments':
        p = profileClient.getProfile(cid, fragments=['/customer/name'])
    elif kind == 'type':
        p = profileClient.getProfile(cid, 'other')
    elif kind == 'missing':
        p = profileClient.getProfile('no-such-profile-' + cid)
    return [Update(cid, ['seen']).set_value(json.dumps(p))]
`
	require.Empty(t, pyCheck(t, tx, lazy, "lazy"))
	out = pyRun(t, tx, pyBelt(), 1, lazy, map[string]any{"fetchProfile": "LAZY", "profileType": "_d"}, []map[string]any{
		pyEvent("e1", cid, "whole"), pyEvent("e2", cid, "fragments"), pyEvent("e3", cid, "type"), pyEvent("e4", cid, "missing"),
	})
	profiles := make([]map[string]any, len(out))
	for i, r := range out {
		require.Nil(t, r.Error, "%s", r)
		require.NoError(t, json.Unmarshal([]byte(r.Updates[0]["_value"].(map[string]any)["_v"].(string)), &profiles[i]))
	}
	latest := func(doc map[string]any, path ...string) any {
		var v any = doc
		for _, p := range path {
			v = v.(map[string]any)[p]
		}
		return v.(map[string]any)["_latest"].(map[string]any)["_v"]
	}
	require.Equal(t, cid, profiles[0]["correlationId"])
	require.Equal(t, "_d", profiles[0]["type"])
	whole := profiles[0]["jsonPayload"].(map[string]any)
	require.Equal(t, "Ada", latest(whole, "customer", "name"))
	require.Equal(t, "42", latest(whole, "invoice"))
	frag := profiles[1]["jsonPayload"].(map[string]any)
	require.Equal(t, "Ada", latest(frag, "customer", "name"))
	require.NotContains(t, frag, "invoice", "only the fragments asked for")
	require.Equal(t, "other", profiles[2]["type"])
	require.Equal(t, "o", latest(profiles[2]["jsonPayload"].(map[string]any), "x"))
	require.Nil(t, profiles[3], "no profile: None")

	// PROFILE_TYPE other: getProfile(cid) reads that type.
	out = pyRun(t, tx, pyBelt(), 1, lazy, map[string]any{"fetchProfile": "LAZY", "profileType": "other"}, []map[string]any{pyEvent("e1", cid, "whole")})
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(out[0].Updates[0]["_value"].(map[string]any)["_v"].(string)), &p))
	require.Equal(t, "other", p["type"])
}

// RetryException gives a retry, any other exception an error with its traceback; neither touches
// the other events of the batch. What is not an Update is skipped.
func TestBeltPythonOutcomes(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	src := `from grnry_belt.exceptions.exception import RetryException

class Thing:
    pass

class BadUpdate(Update):
    def to_dict(self):
        raise RuntimeError('broken')

class BadError(Exception):
    def __str__(self):
        raise RuntimeError('no text')

def helper(x):
    return 1 / x

def execute(event_headers, event_payload):
    k = event_payload
    cid = event_headers['grnry-correlation-id']
    u = Update(cid, ['g']).set_value('v')
    if k == 'retry':
        raise RetryException('Try again')
    if k == 'retry empty':
        raise RetryException()
    if k == 'error':
        return helper(0)
    if k == 'exit':
        raise SystemExit(3)
    if k == 'custom':
        raise KeyError('missing')
    if k == 'none':
        return None
    if k == 'empty':
        return []
    if k == 'single':
        return u
    if k == 'tuple':
        return (u, u)
    if k == 'mixed':
        return [u, None, 'text', {'_id': cid}, Thing(), u]
    if k == 'string':
        return 'not an update'
    if k == 'dict':
        return {'_id': cid}
    if k == 'not json':
        return [Update(cid, ['g']).set_value(Thing())]
    if k == 'nan':
        return [Update(cid, ['g']).set_value(float('nan'))]
    if k == 'bad update':
        return [BadUpdate(cid, ['g'])]
    if k == 'bad error':
        raise BadError()
    return [u]
`
	kinds := []string{"ok", "retry", "retry empty", "error", "exit", "custom", "none", "empty", "single", "tuple", "mixed", "string", "dict", "not json", "nan", "bad update", "bad error", "ok"}
	var events []map[string]any
	for i, k := range kinds {
		events = append(events, pyEvent(fmt.Sprint("e", i), "c1", k))
	}
	out := pyRun(t, tx, pyBelt(), 1, src, pyFalse, events)
	byKind := map[string]pyResult{}
	for i, k := range kinds {
		byKind[k] = out[i]
	}
	for _, i := range []int{0, len(kinds) - 1} {
		require.Nil(t, out[i].Error, "%s", out[i])
		require.Len(t, out[i].Updates, 1, "the other events are not affected: %s", out[i])
	}
	require.Equal(t, "Try again", *byKind["retry"].Retry)
	require.Nil(t, byKind["retry"].Updates)
	require.Equal(t, "RetryException", *byKind["retry empty"].Retry)

	e := byKind["error"]
	require.Equal(t, "ZeroDivisionError: division by zero", *e.Error)
	require.NotNil(t, e.Traceback)
	require.Contains(t, *e.Traceback, "Traceback (most recent call last):")
	require.Regexp(t, `File "/belts/\d+/v1/callback\.py", line 26, in execute\n\s+return helper\(0\)`, *e.Traceback)
	require.Regexp(t, `File "/belts/\d+/v1/callback\.py", line 15, in helper\n\s+return 1 / x`, *e.Traceback)
	require.NotContains(t, *e.Traceback, "silo-belt-runtime", "the runtime's frames are left out")
	require.True(t, strings.HasSuffix(*e.Traceback, "ZeroDivisionError: division by zero\n"))
	require.Equal(t, "SystemExit: 3", *byKind["exit"].Error)
	require.Equal(t, "KeyError: 'missing'", *byKind["custom"].Error)

	require.Equal(t, []map[string]any{}, byKind["none"].Updates)
	require.NotNil(t, byKind["none"].Updates)
	require.Equal(t, []map[string]any{}, byKind["empty"].Updates)
	require.Len(t, byKind["single"].Updates, 1)
	require.Len(t, byKind["tuple"].Updates, 2)
	require.Len(t, byKind["mixed"].Updates, 2)
	require.Equal(t, 4, byKind["mixed"].Skipped)
	require.Equal(t, []map[string]any{}, byKind["string"].Updates)
	require.Equal(t, 1, byKind["string"].Skipped)
	require.Equal(t, 1, byKind["dict"].Skipped)
	require.Contains(t, *byKind["not json"].Error, "not JSON")
	require.Contains(t, *byKind["nan"].Error, "not JSON")
	require.Equal(t, "InvalidResult: the callback's result could not be read: RuntimeError: broken", *byKind["bad update"].Error)
	require.Contains(t, *byKind["bad error"].Error, "InvalidResult: the callback's result could not be read: RuntimeError: no text")
}

// CALLBACK_TIMEOUT_SEC stops callbacks PostgreSQL could not cancel: a pure-Python infinite loop,
// loops that swallow every interruption with a bare except (nested too), a long sleep, and a
// slow import.
// The backend stays usable, and the other events of the batch are processed.
func TestBeltPythonTimeout(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	src := `import time
CAUGHT = []

def execute(event_headers, event_payload):
    k = event_payload
    if k == 'loop':
        while True:
            pass
    if k == 'busy':
        n = 0
        while True:
            n += 1
    if k == 'swallow':
        while True:
            try:
                x = 0
                while True:
                    x += 1
            except:
                CAUGHT.append(1)
    if k == 'nested':
        while True:
            try:
                while True:
                    try:
                        time.sleep(10)
                    except BaseException:
                        CAUGHT.append(2)
            except:
                pass
    if k == 'sleep':
        time.sleep(60)
    if k == 'caught':
        return [Update('c', ['g']).set_value(str(len(CAUGHT)))]
    return [Update('c', ['g']).set_value('fast')]
`
	settings := map[string]any{"fetchProfile": "FALSE", "callbackTimeoutSec": 0.2}
	kinds := []string{"fast", "loop", "fast", "busy", "swallow", "nested", "sleep", "fast"}
	var events []map[string]any
	for i, k := range kinds {
		events = append(events, pyEvent(fmt.Sprint("e", i), "c1", k))
	}
	belt := pyBelt()
	start := time.Now()
	out := pyRun(t, tx, belt, 1, src, settings, events)
	elapsed := time.Since(start)
	for i, k := range kinds {
		if k == "fast" {
			require.Nil(t, out[i].Timeout, "%s", out[i])
			require.Len(t, out[i].Updates, 1)
			continue
		}
		require.NotNil(t, out[i].Timeout, "%s: %s", k, out[i])
		require.Contains(t, *out[i].Timeout, "CALLBACK_TIMEOUT_SEC (0.2 s)")
		require.Nil(t, out[i].Updates)
		require.GreaterOrEqual(t, *out[i].MS, 200.0, k)
	}
	require.Less(t, elapsed, 20*time.Second)
	// The swallowing loop caught the first interruption and was interrupted again.
	out = pyRun(t, tx, belt, 1, src, settings, []map[string]any{pyEvent("e", "c1", "caught")})
	require.NotEqual(t, "0", out[0].Updates[0]["_value"].(map[string]any)["_v"])

	var one int
	require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one))
	requireWatchdogIdle(t, tx)

	// An import that does not finish: every event times out, and the next batch tries again.
	slow := "while True:\n    pass\ndef execute(h, p):\n    return None\n"
	out = pyRun(t, tx, pyBelt(), 1, slow, settings, []map[string]any{pyEvent("e1", "c1", nil), pyEvent("e2", "c1", nil)})
	for _, r := range out {
		require.NotNil(t, r.Error, "%s", r)
		require.Contains(t, *r.Error, "InvalidCallback: executing the callback module took longer than 0.2 s")
	}
}

// requireWatchdogIdle checks that the backend's watchdog thread waits without a timeout (woken
// while the backend runs no Python code, it would poll for Python's lock every 5 ms), and that it
// blocks the signals PostgreSQL sends the backend.
func requireWatchdogIdle(t *testing.T, tx pgx.Tx) {
	t.Helper()
	_, err := tx.Exec(context.Background(), `DO $$
import signal
wd = GD['silo.belt.runtime']._watchdog
if not wd.idle.is_set() or wd.waiting_until is not None or wd.token:
    plpy.error('the watchdog is not idle')
try:
    status = open('/proc/self/task/%d/status' % wd.thread.native_id).read()
except OSError:
    status = None
if status is not None:
    blocked = [l for l in status.splitlines() if l.startswith('SigBlk:')][0].split()[1]
    wanted = sum(1 << (int(n) - 1) for n in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1,
                                              signal.SIGUSR2, signal.SIGALRM, signal.SIGTERM, signal.SIGURG))
    if int(blocked, 16) & wanted != wanted:
        plpy.error('the watchdog thread takes signals: SigBlk ' + blocked)
$$ LANGUAGE plpython3u`)
	require.NoError(t, err)
}

// Callbacks that end around their deadline: a late interruption never lands outside the
// callback (python_run returns, and no event has an error), whichever way each race goes.
func TestBeltPythonTimeoutRace(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	src := `import time
def execute(event_headers, event_payload):
    end = time.monotonic() + event_payload
    while time.monotonic() < end:
        pass
    return [Update('c', ['g']).set_value('v')]
`
	var events []map[string]any
	for i := 0; i < 120; i++ {
		events = append(events, pyEvent(fmt.Sprint("e", i), "c1", 0.005+float64(i%11)*0.001))
	}
	settings := map[string]any{"fetchProfile": "FALSE", "callbackTimeoutSec": 0.01}
	for round := 0; round < 3; round++ {
		out := pyRun(t, tx, pyBelt(), 1, src, settings, events)
		var timeouts, done int
		for _, r := range out {
			require.Nil(t, r.Error, "%s", r)
			require.Nil(t, r.Retry, "%s", r)
			if r.Timeout != nil {
				timeouts++
			} else {
				require.Len(t, r.Updates, 1, "%s", r)
				done++
			}
		}
		require.Equal(t, len(events), timeouts+done)
		require.NotZero(t, done)
		requireWatchdogIdle(t, tx)
	}
}

// CALLBACK_LONGRUNNING_SEC: longRunning and a WARNING; print() output goes to the server log
// (LOG lines), not to the backend's stdout.
func TestBeltPythonLongRunningAndPrint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dbtest.URL(t))
	require.NoError(t, err)
	var mu sync.Mutex
	var notices []*pgconn.Notice
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		notices = append(notices, n)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	requirePython(t, conn)
	_, err = conn.Exec(ctx, `SET client_min_messages = log`)
	require.NoError(t, err)
	src := `import time, logging
print('loaded')
def execute(event_headers, event_payload):
    if event_payload == 'slow':
        time.sleep(0.15)
    print('event', event_payload)
    logging.warning('careful')
    return []
`
	belt := pyBelt()
	out := pyRun(t, conn, belt, 1, src, map[string]any{"fetchProfile": "FALSE", "callbackLongrunningSec": 0.1},
		[]map[string]any{pyEvent("ev-fast", "c1", "fast"), pyEvent("ev-slow", "c1", "slow")})
	require.False(t, *out[0].LongRunning)
	require.True(t, *out[1].LongRunning)
	require.GreaterOrEqual(t, *out[1].MS, 150.0)
	require.Nil(t, out[1].Timeout)

	mu.Lock()
	defer mu.Unlock()
	var logs, warnings []string
	for _, n := range notices {
		switch n.Severity {
		case "LOG":
			logs = append(logs, n.Message)
		case "WARNING":
			warnings = append(warnings, n.Message)
		}
	}
	require.Contains(t, logs, fmt.Sprintf("belt %d version 1, import: loaded", belt))
	require.Contains(t, logs, fmt.Sprintf("belt %d event ev-fast: event fast\nWARNING:root:careful", belt))
	require.Contains(t, logs, fmt.Sprintf("belt %d event ev-slow: event slow\nWARNING:root:careful", belt))
	require.Len(t, warnings, 1, "%v", warnings)
	require.Regexp(t, fmt.Sprintf(`^belt %d: the callback ran \d+ ms on event ev-slow, longer than CALLBACK_LONGRUNNING_SEC \(0\.1 s\)$`, belt), warnings[0])
}

// The module is executed once per backend per (belt id, version): its globals persist from one
// batch to the next; a new version, or another source, executes it again.
func TestBeltPythonModuleCache(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	src := `import os
LOADS = int(os.environ.get('SILO_TEST_LOADS', '0')) + 1
os.environ['SILO_TEST_LOADS'] = str(LOADS)
CALLS = 0
def execute(event_headers, event_payload):
    global CALLS
    CALLS += 1
    return [Update('c', ['g']).set_value('%d/%d' % (LOADS, CALLS))]
`
	values := func(out []pyResult) []string {
		var v []string
		for _, r := range out {
			require.Nil(t, r.Error, "%s", r)
			v = append(v, r.Updates[0]["_value"].(map[string]any)["_v"].(string))
		}
		return v
	}
	two := []map[string]any{pyEvent("e1", "c", nil), pyEvent("e2", "c", nil)}
	belt := pyBelt()
	first := values(pyRun(t, tx, belt, 1, src, pyFalse, two))
	loads := strings.Split(first[0], "/")[0]
	require.Equal(t, []string{loads + "/1", loads + "/2"}, first)
	require.Equal(t, []string{loads + "/3", loads + "/4"}, values(pyRun(t, tx, belt, 1, src, pyFalse, two)), "cached: one exec for both batches")
	next := values(pyRun(t, tx, belt, 2, src, pyFalse, two))
	require.NotEqual(t, loads, strings.Split(next[0], "/")[0], "version 2 executes the module again")
	require.Equal(t, "1", strings.Split(next[0], "/")[1])
	other := values(pyRun(t, tx, belt, 2, src+"\n# changed\n", pyFalse, two))
	require.Equal(t, "1", strings.Split(other[0], "/")[1], "another source under the same version executes again")
}

// The settings' env is the callback's os.environ, for its belt only.
func TestBeltPythonEnv(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	src := `import os
def execute(event_headers, event_payload):
    return [Update('c', ['g']).set_value(os.environ.get('SILO_TEST_FOO', '-') + ',' + os.environ.get('SILO_TEST_BAR', '-'))]
`
	v := func(out []pyResult) string { return out[0].Updates[0]["_value"].(map[string]any)["_v"].(string) }
	ev := []map[string]any{pyEvent("e1", "c", nil)}
	out := pyRun(t, tx, pyBelt(), 1, src, map[string]any{"fetchProfile": "FALSE", "env": map[string]any{"SILO_TEST_FOO": "foo", "SILO_TEST_BAR": 7}}, ev)
	require.Equal(t, "foo,7", v(out))
	out = pyRun(t, tx, pyBelt(), 1, src, map[string]any{"fetchProfile": "FALSE", "env": map[string]any{"SILO_TEST_BAR": "bar"}}, ev)
	require.Equal(t, "-,bar", v(out), "another belt's env is gone")
	out = pyRun(t, tx, pyBelt(), 1, src, pyFalse, ev)
	require.Equal(t, "-,-", v(out))
}

// Arguments python_run refuses with SLINV; an empty batch.
func TestBeltPythonRunArguments(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	src := "def execute(h, p):\n    return None\n"
	for _, c := range []struct{ settings, events string }{
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`{"fetchProfile": "SOMETIMES"}`, `[{}]`},
	} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT belt_private.python_run(1, 1, $1, $2::jsonb, $3::jsonb)`, src, c.settings, c.events)
			return err
		})
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "%v", c)
		require.Equal(t, "SLINV", pgErr.Code, "%v", c)
	}
	var out string
	require.NoError(t, tx.QueryRow(ctx, `SELECT belt_private.python_run(1, 1, $1, '{}', '[]')::text`, src).Scan(&out))
	require.Equal(t, "[]", out)
	var null *string
	require.NoError(t, tx.QueryRow(ctx, `SELECT belt_private.python_run(1, 1, $1, NULL, NULL)::text`, src).Scan(&null))
	require.Equal(t, "[]", *null)
}

// Where the database has no plpython3u, sql/ creates neither function and migrates without error.
func TestBeltPythonAbsentWithoutPLPython(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	_, err := pool.Exec(ctx, `DROP EXTENSION IF EXISTS plpython3u CASCADE`)
	require.NoError(t, err)
	// The next migrate builds sql/ again: the database's languages are part of its hash.
	require.NoError(t, db.Migrate(ctx, pool, nil))
	var check, run, api bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regprocedure('belt_private.python_check(text,text)') IS NOT NULL,
		to_regprocedure('belt_private.python_run(bigint,integer,text,jsonb,jsonb)') IS NOT NULL,
		to_regnamespace('belt_private') IS NOT NULL`).Scan(&check, &run, &api))
	require.False(t, check)
	require.False(t, run)
	require.True(t, api, "the rest of sql/belt is there")

	// A DBA who adds the language gets the runtime from the next migrate, with no change of code.
	_, err = pool.Exec(ctx, `CREATE EXTENSION plpython3u`)
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, pool, nil))
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regprocedure('belt_private.python_run(bigint,integer,text,jsonb,jsonb)') IS NOT NULL`).Scan(&run))
	require.True(t, run)
}

// Where the migrating role may not create functions in plpython3u (only superusers may), the file
// warns and creates nothing: Python belts are refused, the rest of sql/ is built.
func TestBeltPythonAbsentForNonSuperuser(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	body, err := apisql.FS.ReadFile("belt/07_python_4_install.sql")
	require.NoError(t, err)
	role := fmt.Sprintf("silo_py_test_%d_%d", os.Getpid(), time.Now().UnixNano())
	for _, stmt := range []string{
		`CREATE ROLE ` + role + ` NOSUPERUSER`,
		`GRANT USAGE, CREATE ON SCHEMA belt_private TO ` + role,
		`DROP FUNCTION belt_private.python_check(text, text)`,
		`DROP FUNCTION belt_private.python_run(bigint, integer, text, jsonb, jsonb)`,
		`SET LOCAL ROLE ` + role,
	} {
		_, err := tx.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	_, err = tx.Conn().PgConn().Exec(ctx, string(body)).ReadAll()
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `RESET ROLE`)
	require.NoError(t, err)
	var check, run bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT to_regprocedure('belt_private.python_check(text,text)') IS NOT NULL,
		to_regprocedure('belt_private.python_run(bigint,integer,text,jsonb,jsonb)') IS NOT NULL`).Scan(&check, &run))
	require.False(t, check)
	require.False(t, run)
}

// A backend that outlives a migrate which changed the runtime installs the new one at its next
// call: one watchdog thread, time.sleep replaced once, the callback modules executed again.
func TestBeltPythonRuntimeReinstall(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	requirePython(t, tx)
	ctx := context.Background()
	src := "import time\ndef execute(h, p):\n    time.sleep(0.01)\n    return [Update('c', ['g']).set_value('v')]\n"
	belt := pyBelt()
	ev := []map[string]any{pyEvent("e1", "c", nil)}
	out := pyRun(t, tx, belt, 1, src, pyFalse, ev)
	require.Len(t, out[0].Updates, 1)
	_, err := tx.Exec(ctx, `DO $$
GD['silo.belt.runtime'].RUNTIME_HASH = 'an older runtime'
$$ LANGUAGE plpython3u`)
	require.NoError(t, err)
	out = pyRun(t, tx, belt, 1, src, pyFalse, ev)
	require.Len(t, out[0].Updates, 1)
	_, err = tx.Exec(ctx, `DO $$
import threading, time
rt = GD['silo.belt.runtime']
if rt.RUNTIME_HASH == 'an older runtime':
    plpy.error('not installed again')
n = sum(1 for th in threading.enumerate() if th.name == 'silo-belt-watchdog')
if n != 1:
    plpy.error('%d watchdog threads' % n)
if time.sleep is not rt._sliced_sleep or time._silo_orig_sleep.__module__ != 'time':
    plpy.error('time.sleep replaced twice')
$$ LANGUAGE plpython3u`)
	require.NoError(t, err)
}
