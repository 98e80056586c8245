package db_test

// Tests of the belt registry (sql/belt/02_registry.sql): belt documents in and out, the settings of
// extraEnv, callback validation by the seed's rules (SQL functions, and Python through the runtime's
// python_check, stood in for here), states, deletion, and what is published on channel belts. Tests
// run in parallel, each in its own transaction: belt and function names carry a random suffix, so
// that no two tests wait on each other's unique keys.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

type beltEnv struct {
	t      *testing.T
	ctx    context.Context
	tx     pgx.Tx
	q      *db.Queries
	suffix string
}

func newBeltEnv(t *testing.T) *beltEnv {
	t.Helper()
	tx := dbtest.Tx(t)
	return &beltEnv{t: t, ctx: context.Background(), tx: tx, q: db.New(tx), suffix: fmt.Sprintf("%08x", rand.Uint32())}
}

// name is a belt or function name unique to the test.
func (e *beltEnv) name(base string) string { return base + "_" + e.suffix }

// fn creates function public.<base>_<suffix><signature> with a SQL body and returns its name.
func (e *beltEnv) fn(base, signature, body string) string {
	e.t.Helper()
	name := e.name(base)
	_, err := e.tx.Exec(e.ctx, fmt.Sprintf("CREATE FUNCTION public.%s%s LANGUAGE sql AS $f$ %s $f$", name, signature, body))
	require.NoError(e.t, err)
	return name
}

// doc renders a belt document from a map, replacing $NAME by the test's belt name.
func (e *beltEnv) doc(fields map[string]any) json.RawMessage {
	e.t.Helper()
	raw, err := json.Marshal(fields)
	require.NoError(e.t, err)
	return json.RawMessage(strings.ReplaceAll(string(raw), "$NAME", e.name("belt")))
}

type beltDoc struct {
	ID           string           `json:"id"`
	Name         string           `json:"name"`
	Description  *string          `json:"description"`
	Author       *string          `json:"author"`
	Labels       map[string]any   `json:"labels"`
	Version      int              `json:"version"`
	Created      int64            `json:"created"`
	EventTypes   []string         `json:"eventTypes"`
	ExtractorFn  *string          `json:"extractorFn"`
	SQLCallback  *string          `json:"sqlCallback"`
	FetchProfile string           `json:"fetchProfile"`
	ProfileType  string           `json:"profileType"`
	ExtraEnv     []map[string]any `json:"extraEnv"`
	Settings     map[string]any   `json:"settings"`
	Status       string           `json:"status"`
	StatusReason *string          `json:"statusReason"`
	Processed    int64            `json:"processed"`
	Failed       int64            `json:"failed"`
	Retried      int64            `json:"retried"`
	DeadLettered int64            `json:"deadLettered"`
	LongRunning  int64            `json:"longRunning"`
}

func (e *beltEnv) parse(raw json.RawMessage) beltDoc {
	e.t.Helper()
	var d beltDoc
	require.NoError(e.t, json.Unmarshal(raw, &d), string(raw))
	return d
}

func (e *beltEnv) create(fields map[string]any) beltDoc {
	e.t.Helper()
	raw, err := e.q.BeltCreate(e.ctx, e.doc(fields))
	require.NoError(e.t, err)
	return e.parse(raw)
}

// fails runs f in a savepoint and returns the PostgreSQL error it raised (the test fails when it
// raised none), rolling back to the savepoint so that the transaction goes on.
func (e *beltEnv) fails(f func(q *db.Queries) error) *pgconn.PgError {
	e.t.Helper()
	sp, err := e.tx.Begin(e.ctx)
	require.NoError(e.t, err)
	defer func() { require.NoError(e.t, sp.Rollback(e.ctx)) }()
	err = f(db.New(sp))
	var pgErr *pgconn.PgError
	require.True(e.t, errors.As(err, &pgErr), "expected a PostgreSQL error, got %v", err)
	return pgErr
}

func (e *beltEnv) createFails(fields map[string]any) *pgconn.PgError {
	e.t.Helper()
	return e.fails(func(q *db.Queries) error { _, err := q.BeltCreate(e.ctx, e.doc(fields)); return err })
}

func (e *beltEnv) id(d beltDoc) int64 {
	var id int64
	_, err := fmt.Sscan(d.ID, &id)
	require.NoError(e.t, err)
	return id
}

// published is what the transaction published on channel belts so far, as "kind status id" lines.
func (e *beltEnv) published() []string {
	e.t.Helper()
	rows, err := e.tx.Query(e.ctx, `
		SELECT kind || ' ' || (payload ->> 'status') || ' ' || (payload ->> 'belt_id')
		FROM change_private.outbox WHERE channel = 'belts' ORDER BY 1`)
	require.NoError(e.t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(e.t, err)
	return out
}

func sqlBelt(callback string, more ...any) map[string]any {
	m := map[string]any{"name": "$NAME", "eventTypes": []string{"page-view"}, "sqlCallback": callback}
	for i := 0; i+1 < len(more); i += 2 {
		m[more[i].(string)] = more[i+1]
	}
	return m
}

func TestBeltCreateGetListDelete(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	d := e.create(sqlBelt(cb, "description", "counts visits", "author", "ops", "labels", map[string]any{"team": "web"},
		"eventTypes", []string{"page-view", "click", "page-view"}))
	require.NotEmpty(t, d.ID)
	require.Equal(t, e.name("belt"), d.Name)
	require.Equal(t, "counts visits", *d.Description)
	require.Equal(t, "ops", *d.Author)
	require.Equal(t, map[string]any{"team": "web"}, d.Labels)
	require.Equal(t, 1, d.Version)
	require.Positive(t, d.Created)
	require.Equal(t, []string{"click", "page-view"}, d.EventTypes)
	require.Nil(t, d.ExtractorFn)
	require.Equal(t, "public."+cb+"(jsonb, jsonb)", *d.SQLCallback, "stored as the function's full signature")
	require.Equal(t, "FALSE", d.FetchProfile)
	require.Equal(t, "_d", d.ProfileType)
	require.Empty(t, d.ExtraEnv)
	require.Equal(t, "RUNNING", d.Status)
	require.Nil(t, d.StatusReason)
	id := e.id(d)

	// Its event consumer is belt:{id}, with the belt's types and 64 lanes.
	var name string
	var types []string
	var lanes int
	require.NoError(t, e.tx.QueryRow(e.ctx, `
		SELECT c.name, c.event_types, (SELECT count(*) FROM event.consumer_lanes l WHERE l.consumer_id = c.id)
		FROM belt.belts b JOIN event.consumers c ON c.id = b.consumer_id WHERE b.id = $1`, id).Scan(&name, &types, &lanes))
	require.Equal(t, "belt:"+d.ID, name)
	require.Equal(t, []string{"click", "page-view"}, types)
	require.Equal(t, 64, lanes)

	raw, err := e.q.BeltGet(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, d, e.parse(raw))

	// Listed with the others, in order of id.
	e.create(sqlBelt(cb, "name", e.name("second")))
	raw, err = e.q.BeltList(e.ctx, db.BeltListParams{PageOffset: 0, PageSize: 1000})
	require.NoError(t, err)
	var page struct {
		TotalCount int64     `json:"totalCount"`
		Items      []beltDoc `json:"items"`
	}
	require.NoError(t, json.Unmarshal(raw, &page))
	require.GreaterOrEqual(t, page.TotalCount, int64(2))
	var mine []string
	for _, it := range page.Items {
		if strings.HasSuffix(it.Name, e.suffix) {
			mine = append(mine, it.Name)
		}
	}
	require.Equal(t, []string{e.name("belt"), e.name("second")}, mine)
	for _, bad := range []db.BeltListParams{{PageOffset: -1, PageSize: 20}, {PageSize: 0}, {PageSize: 1001}} {
		require.Equal(t, "SLINV", e.fails(func(q *db.Queries) error { _, err := q.BeltList(e.ctx, bad); return err }).Code)
	}

	// Deleting takes the dead letters and the pending deliveries with it; the events stay.
	_, err = e.tx.Exec(e.ctx, `
		INSERT INTO belt.dead_letters (belt_id, belt_version, event_id, event_at, correlation_id, event_type, headers, payload, error)
		VALUES ($1, 1, 'e1', now(), 'c1', 'page-view', '{}', '{}', 'boom')`, id)
	require.NoError(t, err)
	_, err = e.tx.Exec(e.ctx, `
		INSERT INTO event.deliveries (consumer_id, lane, correlation_id, event_cid, event_at, event_id)
		SELECT consumer_id, 0, 'c1', 'c1', now(), 'e1' FROM belt.belts WHERE id = $1`, id)
	require.NoError(t, err)
	deleted, err := e.q.BeltDelete(e.ctx, id)
	require.NoError(t, err)
	require.True(t, deleted)
	var left int
	require.NoError(t, e.tx.QueryRow(e.ctx, `
		SELECT (SELECT count(*) FROM belt.dead_letters WHERE belt_id = $1)
		     + (SELECT count(*) FROM event.consumers WHERE name = 'belt:' || $1)
		     + (SELECT count(*) FROM event.deliveries d WHERE NOT EXISTS (SELECT FROM event.consumers c WHERE c.id = d.consumer_id))`,
		id).Scan(&left))
	require.Zero(t, left)
	deleted, err = e.q.BeltDelete(e.ctx, id)
	require.NoError(t, err)
	require.False(t, deleted, "no belt: false")
	for _, f := range []func(q *db.Queries) error{
		func(q *db.Queries) error { _, err := q.BeltGet(e.ctx, id); return err },
		func(q *db.Queries) error { _, err := q.BeltState(e.ctx, id); return err },
		func(q *db.Queries) error {
			_, err := q.BeltSetState(e.ctx, db.BeltSetStateParams{ID: id, Action: "START"})
			return err
		},
		func(q *db.Queries) error {
			_, err := q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: id, Belt: json.RawMessage(`{}`)})
			return err
		},
	} {
		require.Equal(t, "SLNFD", e.fails(f).Code)
	}
}

func TestBeltNameIsUnique(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	first := e.create(sqlBelt(cb))
	err := e.createFails(sqlBelt(cb))
	require.Equal(t, "SLCNF", err.Code)
	require.Equal(t, e.name("belt")+" exists already", err.Message)
	other := e.create(sqlBelt(cb, "name", e.name("other")))
	err = e.fails(func(q *db.Queries) error {
		_, err := q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: e.id(other), Belt: e.doc(map[string]any{"name": first.Name})})
		return err
	})
	require.Equal(t, "SLCNF", err.Code)
	require.Equal(t, first.Name+" exists already", err.Message)
}

// The document's rules: known fields with the right types, one callback, event types, settings in
// range. Each refusal is SLINV.
func TestBeltDocumentRefusals(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	env := func(name string, value any) []map[string]any { return []map[string]any{{"name": name, "value": value}} }
	for _, tc := range []struct {
		name   string
		fields map[string]any
		msg    string
	}{
		{"unknown field", sqlBelt(cb, "replica", 2), "unknown belt field: replica"},
		{"no name", map[string]any{"eventTypes": []string{"x"}, "sqlCallback": cb}, "a belt needs a name"},
		{"empty name", sqlBelt(cb, "name", " "), "a belt needs a name"},
		{"name not a string", sqlBelt(cb, "name", 7), "name must be a string"},
		{"null name", sqlBelt(cb, "name", nil), "name must be a string"},
		{"no callback", map[string]any{"name": "$NAME", "eventTypes": []string{"x"}}, "a belt needs a callback"},
		{"both callbacks", sqlBelt(cb, "extractorFn", "def execute(h, p): pass"), "not both"},
		{"callback not a string", sqlBelt(cb, "sqlCallback", 1), "sqlCallback must be a string"},
		{"no event types", map[string]any{"name": "$NAME", "sqlCallback": cb}, "eventTypes must be an array"},
		{"event types not strings", sqlBelt(cb, "eventTypes", []any{1}), "eventTypes must be an array"},
		{"no event type", sqlBelt(cb, "eventTypes", []string{}), "at least one event type"},
		{"empty event type", sqlBelt(cb, "eventTypes", []string{""}), "1 to 255 characters"},
		{"labels not an object", sqlBelt(cb, "labels", []string{"a"}), "labels must be a JSON object"},
		{"fetchProfile unknown", sqlBelt(cb, "fetchProfile", "PREFETCH"), "fetchProfile: FALSE, TRUE or LAZY expected"},
		{"profileType empty", sqlBelt(cb, "profileType", ""), "profileType must have 1 to 255 characters"},
		{"extraEnv not an array", sqlBelt(cb, "extraEnv", map[string]any{"A": "1"}), "extraEnv must be an array"},
		{"extraEnv without name", sqlBelt(cb, "extraEnv", []map[string]any{{"value": "1"}}), "extraEnv must be an array"},
		{"extraEnv with null value", sqlBelt(cb, "extraEnv", env("X", nil)), "extraEnv must be an array"},
		{"extraEnv name twice", sqlBelt(cb, "extraEnv", []map[string]any{{"name": "X", "value": "1"}, {"name": "X", "value": "2"}}), "extraEnv names X more than once"},
		{"timeout not a number", sqlBelt(cb, "extraEnv", env("CALLBACK_TIMEOUT_SEC", "soon")), "extraEnv CALLBACK_TIMEOUT_SEC: a number greater than 0"},
		{"timeout zero", sqlBelt(cb, "extraEnv", env("CALLBACK_TIMEOUT_SEC", "0")), "extraEnv CALLBACK_TIMEOUT_SEC"},
		{"timeout above a day", sqlBelt(cb, "extraEnv", env("CALLBACK_TIMEOUT_SEC", 86401)), "extraEnv CALLBACK_TIMEOUT_SEC"},
		{"long-running negative", sqlBelt(cb, "extraEnv", env("CALLBACK_LONGRUNNING_SEC", "-1")), "extraEnv CALLBACK_LONGRUNNING_SEC"},
		{"initial interval negative", sqlBelt(cb, "extraEnv", env("RETRY_BACK_OFF_INITIAL_INTERVAL_SEC", "-0.5")), "extraEnv RETRY_BACK_OFF_INITIAL_INTERVAL_SEC"},
		{"max interval not a number", sqlBelt(cb, "extraEnv", env("RETRY_BACK_OFF_INTERVAL_MAX_SEC", "1m")), "extraEnv RETRY_BACK_OFF_INTERVAL_MAX_SEC"},
		{"multiplier below 1", sqlBelt(cb, "extraEnv", env("RETRY_BACK_OFF_MULTIPLIER", "0.5")), "extraEnv RETRY_BACK_OFF_MULTIPLIER: a number from 1"},
		{"max retries below -1", sqlBelt(cb, "extraEnv", env("RETRY_MAX_RETRIES", "-2")), "extraEnv RETRY_MAX_RETRIES: an integer from -1"},
		{"max retries not whole", sqlBelt(cb, "extraEnv", env("RETRY_MAX_RETRIES", "1.5")), "extraEnv RETRY_MAX_RETRIES: an integer"},
		{"FETCH_PROFILE unknown", sqlBelt(cb, "extraEnv", env("FETCH_PROFILE", "sometimes")), "extraEnv FETCH_PROFILE: FALSE, TRUE or LAZY expected"},
		{"PROFILE_TYPE empty", sqlBelt(cb, "extraEnv", env("PROFILE_TYPE", "")), "extraEnv PROFILE_TYPE must not be empty"},
	} {
		err := e.createFails(tc.fields)
		require.Equal(t, "SLINV", err.Code, tc.name)
		require.Contains(t, err.Message, tc.msg, tc.name)
	}
	for _, doc := range []string{`[]`, `"belt"`, `null`} {
		err := e.fails(func(q *db.Queries) error { _, err := q.BeltCreate(e.ctx, json.RawMessage(doc)); return err })
		require.Equal(t, "SLINV", err.Code, doc)
	}
	require.Empty(t, e.published(), "nothing refused is published")
}

// Granary's deployment fields and the answered ones are accepted and ignored, so a document read
// can be sent back as it is.
func TestBeltIgnoredFields(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	d := e.create(sqlBelt(cb, "kubernetesName", "b", "replicas", 3, "millicpu", 500, "memory", "1Gi",
		"requirementsPy", "requests", "extractorVersion", "1.2", "volumes", []any{}, "volumeMounts", []any{},
		"partitionOffsets", map[string]any{}, "secretName", "s", "secretKey", "k", "editor", "belt_edit", "viewer", "belt_view",
		"id", "999", "version", 42, "status", "STOPPED", "processed", 7))
	require.Equal(t, 1, d.Version)
	require.Equal(t, "RUNNING", d.Status)
	require.Zero(t, d.Processed)
	raw, err := e.q.BeltGet(e.ctx, e.id(d))
	require.NoError(t, err)
	var all map[string]any
	require.NoError(t, json.Unmarshal(raw, &all))
	for _, k := range []string{"kubernetesName", "replicas", "secretName", "editor"} {
		require.NotContains(t, all, k)
	}
	// GET, then PUT the same document: accepted, version + 1.
	raw, err = e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: e.id(d), Belt: raw})
	require.NoError(t, err)
	again := e.parse(raw)
	require.Equal(t, 2, again.Version)
	require.Equal(t, d.SQLCallback, again.SQLCallback)
}

func TestBeltSettings(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb, profile jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	d := e.create(sqlBelt(cb, "extraEnv", []map[string]any{
		{"name": "CALLBACK_TIMEOUT_SEC", "value": "30"},
		{"name": "CALLBACK_LONGRUNNING_SEC", "value": 10.5},
		{"name": "RETRY_BACK_OFF_INITIAL_INTERVAL_SEC", "value": "0"},
		{"name": "RETRY_BACK_OFF_INTERVAL_MAX_SEC", "value": "5"},
		{"name": "RETRY_BACK_OFF_MULTIPLIER", "value": "1.5"},
		{"name": "RETRY_MAX_RETRIES", "value": "-1"},
		{"name": "FETCH_PROFILE", "value": "true"},
		{"name": "PROFILE_TYPE", "value": "customer"},
		{"name": "MY_SETTING", "value": "kept"},
	}))
	require.Equal(t, "TRUE", d.FetchProfile, "FETCH_PROFILE of extraEnv")
	require.Equal(t, "customer", d.ProfileType, "PROFILE_TYPE of extraEnv")
	require.Equal(t, "RUNNING", d.Status, "validated with FETCH_PROFILE TRUE: 3 parameters")
	require.Len(t, d.ExtraEnv, 9, "extraEnv is kept as given")
	var cols [6]string
	require.NoError(t, e.tx.QueryRow(e.ctx, `
		SELECT callback_timeout_sec::text, callback_longrunning_sec::text, retry_initial_sec::text, retry_max_sec::text,
		       retry_multiplier::text, retry_max_retries::text
		FROM belt.belts WHERE id = $1`, e.id(d)).Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5]))
	require.Equal(t, [6]string{"30", "10.5", "0", "5", "1.5", "-1"}, cols)
	require.Equal(t, map[string]any{"callbackTimeoutSec": 30.0, "callbackLongrunningSec": 10.5,
		"retryBackOffInitialIntervalSec": 0.0, "retryBackOffIntervalMaxSec": 5.0, "retryBackOffMultiplier": 1.5,
		"retryMaxRetries": -1.0}, d.Settings)

	// The fields win over extraEnv.
	d2 := e.create(sqlBelt(cb, "name", e.name("fields"), "fetchProfile", "lazy", "profileType", "_d", "extraEnv",
		[]map[string]any{{"name": "FETCH_PROFILE", "value": "TRUE"}, {"name": "PROFILE_TYPE", "value": "customer"},
			{"name": "RETRY_MAX_RETRIES", "value": 0}}))
	require.Equal(t, "LAZY", d2.FetchProfile)
	require.Equal(t, "_d", d2.ProfileType)
	require.Equal(t, 0.0, d2.Settings["retryMaxRetries"])
	require.Equal(t, "FAILED", d2.Status, "LAZY: a third parameter needs a default")

	// Defaults.
	d3 := e.create(sqlBelt(cb, "name", e.name("defaults"), "fetchProfile", true))
	require.Equal(t, map[string]any{"callbackTimeoutSec": 300.0, "callbackLongrunningSec": 180.0,
		"retryBackOffInitialIntervalSec": 1.0, "retryBackOffIntervalMaxSec": 60.0, "retryBackOffMultiplier": 2.0,
		"retryMaxRetries": -1.0}, d3.Settings)
	require.Equal(t, "TRUE", d3.FetchProfile, "a JSON boolean")

	// An update with extraEnv replaces the list: settings it leaves out return to their defaults;
	// fetchProfile, given nowhere, stays.
	raw, err := e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: e.id(d), Belt: json.RawMessage(
		`{"extraEnv": [{"name": "RETRY_MAX_RETRIES", "value": "4"}]}`)})
	require.NoError(t, err)
	u := e.parse(raw)
	require.Equal(t, 4.0, u.Settings["retryMaxRetries"])
	require.Equal(t, 300.0, u.Settings["callbackTimeoutSec"])
	require.Equal(t, "TRUE", u.FetchProfile)
	require.Equal(t, "customer", u.ProfileType)
}

// The seed's callback validation for SQL callbacks: the function exists (by signature, or by a
// name only one function has), 2 or 3 jsonb parameters, returns jsonb, and the FETCH_PROFILE cases.
// A callback that does not validate leaves the belt FAILED with the reason.
func TestBeltSQLCallbackValidation(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	two := e.fn("two", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	three := e.fn("three", "(h jsonb, p jsonb, profile jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	threeDef := e.fn("three_def", "(h jsonb, p jsonb, profile jsonb DEFAULT NULL) RETURNS jsonb", "SELECT NULL::jsonb")
	one := e.fn("one", "(h jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	four := e.fn("four", "(a jsonb, b jsonb, c jsonb, d jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	textArg := e.fn("text_arg", "(h text, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	retText := e.fn("ret_text", "(h jsonb, p jsonb) RETURNS text", "SELECT ''")
	retSet := e.fn("ret_set", "(h jsonb, p jsonb) RETURNS SETOF jsonb", "SELECT NULL::jsonb")
	over := e.fn("over", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	_, err := e.tx.Exec(e.ctx, fmt.Sprintf(`CREATE FUNCTION public.%s(h jsonb, p jsonb, q jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT NULL::jsonb'`, over))
	require.NoError(t, err)
	proc := e.name("proc")
	_, err = e.tx.Exec(e.ctx, fmt.Sprintf(`CREATE PROCEDURE public.%s(h jsonb, p jsonb) LANGUAGE sql AS 'SELECT 1'`, proc))
	require.NoError(t, err)

	i := 0
	for _, tc := range []struct {
		callback, fetch string
		reason          string // "" : valid (RUNNING)
	}{
		{two, "FALSE", ""},
		{two, "LAZY", ""},
		{two, "TRUE", "with FETCH_PROFILE TRUE the callback must have exactly 3 parameters"},
		{three, "TRUE", ""},
		{three, "FALSE", "with FETCH_PROFILE FALSE the callback may have a third parameter only with a default"},
		{three, "LAZY", "with FETCH_PROFILE LAZY the callback may have a third parameter only with a default"},
		{threeDef, "FALSE", ""},
		{threeDef, "LAZY", ""},
		{threeDef, "TRUE", ""},
		{one, "FALSE", "the callback must have 2 or 3 parameters"},
		{four, "TRUE", "the callback must have 2 or 3 parameters"},
		{textArg, "FALSE", "the callback's parameters must be jsonb"},
		{retText, "FALSE", "the callback must return jsonb"},
		{retSet, "FALSE", "the callback must return jsonb: public." + retSet + "(jsonb, jsonb) returns setof jsonb"},
		{proc, "FALSE", "is not a function"},
		{e.name("missing"), "FALSE", "function " + e.name("missing") + " does not exist"},
		{"public." + e.name("missing") + "(jsonb, jsonb)", "FALSE", "does not exist"},
		{"nosuchschema." + two, "FALSE", "does not exist"},
		{"a.b.c", "FALSE", "is not a function name"},
		{two + "(jsonb", "FALSE", "is not a function signature"},
		{over, "FALSE", "function name " + over + " is ambiguous: 2 functions have it; give the signature"},
		{over + "(jsonb, jsonb)", "FALSE", ""},
		{"public." + over + "(jsonb,jsonb,jsonb)", "TRUE", ""},
		{"public." + two, "FALSE", ""},
		{"PUBLIC." + two, "FALSE", ""},
	} {
		i++
		name := fmt.Sprintf("%s_%d", e.name("v"), i)
		d := e.create(sqlBelt(tc.callback, "name", name, "fetchProfile", tc.fetch))
		what := tc.callback + " " + tc.fetch
		if tc.reason == "" {
			require.Equal(t, "RUNNING", d.Status, what)
			require.Nil(t, d.StatusReason, what)
			require.True(t, strings.HasPrefix(*d.SQLCallback, "public."), what)
			require.True(t, strings.HasSuffix(*d.SQLCallback, ")"), what)
			continue
		}
		require.Equal(t, "FAILED", d.Status, what)
		require.NotNil(t, d.StatusReason, what)
		require.Contains(t, *d.StatusReason, "callback validation failed: ", what)
		require.Contains(t, *d.StatusReason, tc.reason, what)
		require.Equal(t, tc.callback, *d.SQLCallback, "a callback that did not validate is kept as given")
		raw, err := e.q.BeltState(e.ctx, e.id(d))
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"status": "FAILED", "reason": %q}`, *d.StatusReason), string(raw))
	}
}

// START validates again: a FAILED belt runs once its function exists. STOP stops whatever the
// state; an update keeps a stopped belt stopped.
func TestBeltStates(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.name("later")
	d := e.create(sqlBelt(cb))
	require.Equal(t, "FAILED", d.Status)
	id := e.id(d)
	state := func(action string) string {
		t.Helper()
		raw, err := e.q.BeltSetState(e.ctx, db.BeltSetStateParams{ID: id, Action: action})
		require.NoError(t, err)
		var s struct {
			Status string
			Reason *string
		}
		require.NoError(t, json.Unmarshal(raw, &s))
		got, err := e.q.BeltState(e.ctx, id)
		require.NoError(t, err)
		require.JSONEq(t, string(raw), string(got))
		return s.Status
	}
	require.Equal(t, "FAILED", state("START"))
	e.fn("later", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	require.Equal(t, "RUNNING", state("start"))
	raw, err := e.q.BeltGet(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "public."+cb+"(jsonb, jsonb)", *e.parse(raw).SQLCallback)
	require.Equal(t, "STOPPED", state("STOP"))
	raw, err = e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: id, Belt: json.RawMessage(`{"description": "x"}`)})
	require.NoError(t, err)
	require.Equal(t, "STOPPED", e.parse(raw).Status, "an update keeps a stopped belt stopped")
	require.Equal(t, "RUNNING", state("START"))
	require.Equal(t, "RUNNING", state("START"))
	_, err = e.tx.Exec(e.ctx, fmt.Sprintf("DROP FUNCTION public.%s", cb))
	require.NoError(t, err)
	require.Equal(t, "FAILED", state("START"))
	require.Equal(t, "STOPPED", state("STOP"))
	err2 := e.fails(func(q *db.Queries) error {
		_, err := q.BeltSetState(e.ctx, db.BeltSetStateParams{ID: id, Action: "PAUSE"})
		return err
	})
	require.Equal(t, "SLINV", err2.Code)
	// Every change of state was published; START of a running belt changed nothing.
	require.Equal(t, sortedCopy([]string{
		"state FAILED " + d.ID, // created
		"state RUNNING " + d.ID,
		"state STOPPED " + d.ID,
		"state STOPPED " + d.ID, // the update
		"state RUNNING " + d.ID,
		"state FAILED " + d.ID,
		"state STOPPED " + d.ID,
	}), e.published())
}

func sortedCopy(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// PUT: the fields given replace the old ones, version + 1, event types go to the consumer, and a
// callback given replaces the other language's.
func TestBeltUpdate(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	d := e.create(sqlBelt(cb, "description", "first", "author", "me"))
	id := e.id(d)
	update := func(doc string) beltDoc {
		t.Helper()
		raw, err := e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: id, Belt: json.RawMessage(doc)})
		require.NoError(t, err)
		return e.parse(raw)
	}
	u := update(`{"description": "second", "eventTypes": ["click"]}`)
	require.Equal(t, 2, u.Version)
	require.Equal(t, "second", *u.Description)
	require.Equal(t, "me", *u.Author, "kept")
	require.Equal(t, []string{"click"}, u.EventTypes)
	require.Equal(t, d.Created, u.Created)
	var types []string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT c.event_types FROM event.consumers c WHERE c.name = 'belt:' || $1`, d.ID).Scan(&types))
	require.Equal(t, []string{"click"}, types)
	u = update(`{"author": null, "name": "` + e.name("renamed") + `"}`)
	require.Equal(t, 3, u.Version)
	require.Nil(t, u.Author)
	require.Equal(t, e.name("renamed"), u.Name)
	u = update(`{}`)
	require.Equal(t, 4, u.Version, "every PUT is a new version")
	// A callback that no longer validates: FAILED; a valid one again: RUNNING.
	u = update(`{"fetchProfile": "TRUE"}`)
	require.Equal(t, "FAILED", u.Status)
	u = update(`{"fetchProfile": "FALSE"}`)
	require.Equal(t, "RUNNING", u.Status)
	require.Nil(t, u.StatusReason)
	// Both null: no callback left.
	err := e.fails(func(q *db.Queries) error {
		_, err := q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: id, Belt: json.RawMessage(`{"sqlCallback": null}`)})
		return err
	})
	require.Equal(t, "SLINV", err.Code)
	require.Contains(t, err.Message, "a belt needs a callback")
	err = e.fails(func(q *db.Queries) error {
		_, err := q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: id, Belt: json.RawMessage(`{"eventTypes": []}`)})
		return err
	})
	require.Equal(t, "SLINV", err.Code)
}

func TestBeltCountersAreLaneSums(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	d := e.create(sqlBelt(cb))
	_, err := e.tx.Exec(e.ctx, `
		UPDATE event.consumer_lanes l SET processed = l.lane + 1, failed = 2, retried = 3, dead_lettered = 1, long_running = l.lane % 2
		FROM belt.belts b WHERE b.id = $1 AND l.consumer_id = b.consumer_id AND l.lane < 4`, e.id(d))
	require.NoError(t, err)
	raw, err := e.q.BeltGet(e.ctx, e.id(d))
	require.NoError(t, err)
	got := e.parse(raw)
	require.Equal(t, [5]int64{10, 8, 12, 4, 2}, [5]int64{got.Processed, got.Failed, got.Retried, got.DeadLettered, got.LongRunning})
}

// Python callbacks are validated by the Python runtime's belt_private.python_check, called by
// name: a stand-in of the same signature here, so the test holds with and without PL/Python.
// Without the runtime a Python belt is refused with SBPYN, and SQL belts still work.
func TestBeltPythonCallbacks(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	_, err := e.tx.Exec(e.ctx, `
		DO $$ BEGIN
			IF to_regprocedure('belt_private.python_check(text,text)') IS NOT NULL THEN
				ALTER FUNCTION belt_private.python_check(text, text) RENAME TO python_check_real;
			END IF;
		END $$`)
	require.NoError(t, err)
	py := map[string]any{"name": "$NAME", "eventTypes": []string{"page-view"},
		"extractorFn": "def execute(event_headers, event_payload, profile=None):\n    return []\n"}
	perr := e.createFails(py)
	require.Equal(t, "SBPYN", perr.Code)
	require.Contains(t, perr.Message, "PL/Python")
	require.Contains(t, perr.Hint, "CREATE EXTENSION plpython3u")
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	require.Equal(t, "RUNNING", e.create(sqlBelt(cb)).Status, "SQL belts work without Python")

	_, err = e.tx.Exec(e.ctx, `
		CREATE FUNCTION belt_private.python_check(p_source text, p_fetch_profile text) RETURNS text LANGUAGE sql AS $$
			SELECT CASE WHEN strpos(p_source, 'def execute(') = 0 THEN 'no method execute'
			            WHEN p_fetch_profile = 'TRUE' AND strpos(p_source, 'profile') = 0 THEN 'needs 3 parameters' END
		$$`)
	require.NoError(t, err)
	d := e.create(map[string]any{"name": e.name("py"), "eventTypes": []string{"page-view"}, "extractorFn": py["extractorFn"], "fetchProfile": "TRUE"})
	require.Equal(t, "RUNNING", d.Status)
	require.Equal(t, py["extractorFn"], *d.ExtractorFn)
	require.Nil(t, d.SQLCallback)
	var lang string
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT language FROM belt.belts WHERE id = $1`, e.id(d)).Scan(&lang))
	require.Equal(t, "python", lang)
	bad := e.create(map[string]any{"name": e.name("pybad"), "eventTypes": []string{"x"}, "extractorFn": "def run(h, p): pass"})
	require.Equal(t, "FAILED", bad.Status)
	require.Equal(t, "callback validation failed: no method execute", *bad.StatusReason)
	// The fetch mode reaches the check.
	raw, err := e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: e.id(d), Belt: json.RawMessage(`{"extractorFn": "def execute(h, p): pass"}`)})
	require.NoError(t, err)
	require.Equal(t, "callback validation failed: needs 3 parameters", *e.parse(raw).StatusReason)
	// A checker that raises fails the belt instead of the request.
	_, err = e.tx.Exec(e.ctx, `
		CREATE OR REPLACE FUNCTION belt_private.python_check(p_source text, p_fetch_profile text) RETURNS text LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'interpreter gone' USING ERRCODE = '58000'; END $$`)
	require.NoError(t, err)
	crashed := e.create(map[string]any{"name": e.name("pycrash"), "eventTypes": []string{"x"}, "extractorFn": "def execute(h, p): pass"})
	require.Equal(t, "FAILED", crashed.Status)
	require.Equal(t, "callback validation failed: the Python check failed: interpreter gone (SQLSTATE 58000)", *crashed.StatusReason)
	// Switching to a SQL callback drops the Python source.
	raw, err = e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: e.id(d), Belt: json.RawMessage(`{"extractorFn": null, "sqlCallback": "` + cb + `", "fetchProfile": "FALSE"}`)})
	require.NoError(t, err)
	sw := e.parse(raw)
	require.Nil(t, sw.ExtractorFn)
	require.Equal(t, "RUNNING", sw.Status)
	require.NoError(t, e.tx.QueryRow(e.ctx, `SELECT language FROM belt.belts WHERE id = $1`, e.id(d)).Scan(&lang))
	require.Equal(t, "sql", lang)
}

// Creation, update, start, stop, failure and deletion publish kind state on channel belts, for
// admins only (no readers), in the writing transaction.
func TestBeltStateChangesArePublished(t *testing.T) {
	t.Parallel()
	e := newBeltEnv(t)
	cb := e.fn("cb", "(h jsonb, p jsonb) RETURNS jsonb", "SELECT NULL::jsonb")
	d := e.create(sqlBelt(cb))
	id := e.id(d)
	_, err := e.q.BeltUpdate(e.ctx, db.BeltUpdateParams{ID: id, Belt: json.RawMessage(`{"fetchProfile": "TRUE"}`)})
	require.NoError(t, err)
	_, err = e.q.BeltDelete(e.ctx, id)
	require.NoError(t, err)
	require.Equal(t, []string{"state DELETED " + d.ID, "state FAILED " + d.ID, "state RUNNING " + d.ID}, e.published())
	var readers []string
	var adminOnly bool
	require.NoError(t, e.tx.QueryRow(e.ctx, `
		SELECT (SELECT readers FROM change_private.outbox WHERE channel = 'belts' LIMIT 1), change_private.channel_admin_only('belts')`).
		Scan(&readers, &adminOnly))
	require.Empty(t, readers)
	require.True(t, adminOnly)
}
