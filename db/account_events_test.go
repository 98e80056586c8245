package db_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestAccountEventCreate(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)

	out, err := b.event(t, b.personal, `{"streamId": "diary", "type": "note/txt", "content": {"a": null, "b": [1, 2]}, "time": 1700000000.125,
		"tags": ["x"], "description": "d", "clientData": {"k": 1}}`)
	require.NoError(t, err)
	e := out["event"].(map[string]any)
	require.Regexp(t, `^c[0-9a-f]{24}$`, e["id"])
	require.Equal(t, []any{"diary"}, e["streamIds"])
	require.Equal(t, "diary", e["streamId"])
	require.Equal(t, 1700000000.125, e["time"])
	require.Equal(t, map[string]any{"a": nil, "b": []any{1.0, 2.0}}, e["content"], "nulls inside content are kept")
	require.Equal(t, []any{"x"}, e["tags"])
	require.Equal(t, b.personal, e["createdBy"])
	require.Equal(t, b.personal, e["modifiedBy"])
	require.NotContains(t, e, "duration")
	require.NotContains(t, e, "trashed")

	// time defaults to now; streamIds are deduplicated in order.
	out, err = b.event(t, b.personal, `{"id": "cabcdefghijklmnopqrstuvwx", "streamIds": ["work", "diary", "work"], "type": "activity/plain"}`)
	require.NoError(t, err)
	e = out["event"].(map[string]any)
	require.Equal(t, "cabcdefghijklmnopqrstuvwx", e["id"])
	require.Equal(t, []any{"work", "diary"}, e["streamIds"])
	require.Equal(t, "work", e["streamId"])
	require.InDelta(t, e["created"], e["time"], 0.001)

	for _, tc := range []struct{ body, code string }{
		{`[1]`, "SASTR"},
		{`{"type": "note/txt"}`, "SAINV"},
		{`{"streamIds": [], "type": "note/txt"}`, "SAINV"},
		{`{"streamIds": [1], "type": "note/txt"}`, "SAINV"},
		{`{"streamIds": ["diary"], "streamId": "work", "type": "note/txt"}`, "SAINV"},
		{`{"streamId": "diary"}`, "SAINV"},
		{`{"streamId": "diary", "type": "Note/Txt"}`, "SAINV"},
		{`{"streamId": "diary", "type": "notype"}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "time": "now"}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "duration": -1}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "time": 1e400}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "duration": 1e400}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "tags": "x"}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "clientData": []}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "unknown": 1}`, "SAINV"},
		{`{"streamId": "diary", "type": "note/txt", "id": "not-a-cuid"}`, "SAINV"},
		{`{"streamId": "nowhere", "type": "note/txt"}`, "SAREF"},
		{`{"id": "cabcdefghijklmnopqrstuvwx", "streamId": "diary", "type": "note/txt"}`, "SACNF"},
	} {
		_, err := b.event(t, b.personal, tc.body)
		accountCode(t, err, tc.code)
	}
}

// A series holder: its type must be in the catalogue, the server makes its content, its
// duration starts at 0 and it gets a series id of its own.
func TestAccountSeriesHolder(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)

	out, err := b.event(t, b.personal, `{"streamIds": ["heart"], "type": "series:mass/kg"}`)
	require.NoError(t, err)
	e := out["event"].(map[string]any)
	require.Equal(t, map[string]any{"elementType": "mass/kg", "fields": []any{"deltaTime", "value"}, "required": []any{"deltaTime", "value"}}, e["content"])
	require.Equal(t, 0.0, e["duration"])

	out, err = b.event(t, b.personal, `{"streamIds": ["heart"], "type": "series:position/wgs84", "duration": 0}`)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"elementType": "position/wgs84",
		"fields":   []any{"deltaTime", "latitude", "longitude", "altitude", "horizontalAccuracy", "verticalAccuracy", "speed", "bearing"},
		"required": []any{"deltaTime", "latitude", "longitude"}}, out["event"].(map[string]any)["content"])
	for _, ok := range []string{"series:ratio/generic", "series:call/telephone", "series:boolean/bool", "series:music/basic"} {
		_, err := b.event(t, b.personal, `{"streamIds": ["heart"], "type": "`+ok+`"}`)
		require.NoError(t, err, ok)
	}
	for _, tc := range []struct{ body, code string }{
		{`{"streamIds": ["heart"], "type": "series:mass/nope"}`, "SATYP"},
		{`{"streamIds": ["heart"], "type": "series:activity/plain"}`, "SATYP"},
		{`{"streamIds": ["heart"], "type": "series:audiogram/data"}`, "SATYP"},
		{`{"streamIds": ["heart"], "type": "series:mass/kg", "content": {"x": 1}}`, "SAINV"},
		{`{"streamIds": ["heart"], "type": "series:mass/kg", "duration": 5}`, "SAINV"},
	} {
		_, err := b.event(t, b.personal, tc.body)
		accountCode(t, err, tc.code)
	}

	// The catalogue covers every class whose values are numbers, strings or booleans.
	var types, classes int
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*), count(DISTINCT split_part(type, '/', 1)) FROM account.series_types`).Scan(&types, &classes))
	require.Equal(t, 321, types)
	require.Equal(t, 56, classes)
	var kinds []string
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT array_agg(DISTINCT kind ORDER BY kind) FROM account.series_type_fields`).Scan(&kinds))
	require.Equal(t, []string{"boolean", "integer", "number", "string"}, kinds)
}

// Updates: any property of a plain event; a series event keeps its type, content and duration.
func TestAccountEventUpdate(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	out, err := b.event(t, b.personal, `{"streamId": "diary", "type": "note/txt", "content": "a", "time": 100}`)
	require.NoError(t, err)
	plain := out["event"].(map[string]any)["id"].(string)
	out, err = b.event(t, b.personal, `{"streamId": "heart", "type": "series:mass/kg", "time": 100}`)
	require.NoError(t, err)
	series := out["event"].(map[string]any)
	seriesID := series["id"].(string)

	update := func(by, id, body string) (map[string]any, error) {
		out, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountEventUpdate(b.ctx, db.AccountEventUpdateParams{AccessID: by, ID: id, Update: json.RawMessage(body)})
		})
		if err != nil {
			return nil, err
		}
		return out["event"].(map[string]any), nil
	}
	e, err := update(b.personal, plain, `{"content": "b", "time": 200, "streamIds": ["work"], "type": "note/html", "duration": 5, "description": "d"}`)
	require.NoError(t, err)
	require.Equal(t, "b", e["content"])
	require.Equal(t, 200.0, e["time"])
	require.Equal(t, []any{"work"}, e["streamIds"])
	require.Equal(t, "note/html", e["type"])
	require.Equal(t, 5.0, e["duration"])
	_, err = update(b.personal, plain, `{"type": "series:mass/kg"}`)
	accountCode(t, err, "SAOPR")

	e, err = update(b.personal, seriesID, `{"time": 150, "description": "scale", "tags": ["home"]}`)
	require.NoError(t, err)
	require.Equal(t, 150.0, e["time"])
	for _, body := range []string{`{"type": "series:mass/lb"}`, `{"type": "mass/kg"}`, `{"content": {"x": 1}}`, `{"duration": 10}`, `{"duration": null}`} {
		_, err := update(b.personal, seriesID, body)
		accountCode(t, err, "SAOPR")
	}
	// The values it has are accepted: a client may send the event back whole.
	same, err := json.Marshal(map[string]any{"type": series["type"], "content": series["content"], "duration": series["duration"]})
	require.NoError(t, err)
	_, err = update(b.personal, seriesID, string(same))
	require.NoError(t, err)

	for _, tc := range []struct{ id, body, code string }{
		{plain, `"x"`, "SASTR"},
		{plain, `{"id": "cother"}`, "SAINV"},
		{plain, `{"time": null}`, "SAINV"},
		{plain, `{"time": -1e400}`, "SAINV"},
		{plain, `{"streamIds": ["nowhere"]}`, "SAREF"},
		{"cnosuchevent0000000000000", `{"time": 1}`, "SANFD"},
	} {
		_, err := update(b.personal, tc.id, tc.body)
		accountCode(t, err, tc.code)
	}
}

// DELETE trashes, then deletes; the id may be used again, and a recreated series holder gets a
// new series.
func TestAccountEventDelete(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	const id = "cseries0000000000000000001"
	body := `{"id": "` + id[:25] + `", "streamId": "heart", "type": "series:mass/kg"}`
	_, err := b.event(t, b.personal, body)
	require.NoError(t, err)
	var first int64
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT series_id FROM account.events WHERE id = $1`, id[:25]).Scan(&first))

	del := func() (map[string]any, error) {
		return b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountEventDelete(b.ctx, db.AccountEventDeleteParams{AccessID: b.personal, ID: id[:25]})
		})
	}
	out, err := del()
	require.NoError(t, err)
	require.Equal(t, true, out["event"].(map[string]any)["trashed"])
	out, err = del()
	require.NoError(t, err)
	gone := out["eventDeletion"].(map[string]any)
	require.Equal(t, id[:25], gone["id"])
	require.IsType(t, 0.0, gone["deleted"])
	_, err = del()
	accountCode(t, err, "SANFD")
	_, err = b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountEventGet(b.ctx, db.AccountEventGetParams{AccessID: b.personal, ID: id[:25]})
	})
	accountCode(t, err, "SANFD")
	var deletions int
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM account.event_deletions WHERE id = $1`, id[:25]).Scan(&deletions))
	require.Equal(t, 1, deletions)

	_, err = b.event(t, b.personal, body)
	require.NoError(t, err, "the id of a deleted event may be used again")
	var second int64
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT series_id FROM account.events WHERE id = $1`, id[:25]).Scan(&second))
	require.Greater(t, second, first, "a recreated series holder holds a new series")
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM account.event_deletions WHERE id = $1`, id[:25]).Scan(&deletions))
	require.Equal(t, 0, deletions)
}

// Who may do what with events, per access kind and level; a permission covers the stream's
// descendants and the nearest one wins.
func TestAccountEventPermissions(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	n := 0
	app := func(perms string) string {
		n++
		id, err := b.app(t, b.personal, fmt.Sprintf(`{"name": "app-%d", "permissions": %s}`, n, perms))
		require.NoError(t, err)
		return id
	}
	reader := app(`[{"streamId": "diary", "level": "read"}]`)
	contributor := app(`[{"streamId": "heart", "level": "contribute"}]`)
	creator := app(`[{"streamId": "heart", "level": "create-only"}]`)
	star := app(`[{"streamId": "*", "level": "contribute"}, {"streamId": "work", "level": "read"}]`)
	manager := app(`[{"streamId": "diary", "level": "manage"}, {"streamId": "ecg", "level": "read"}]`)

	out, err := b.event(t, b.personal, `{"streamIds": ["ecg", "work"], "type": "note/txt", "content": "x"}`)
	require.NoError(t, err)
	both := out["event"].(map[string]any)["id"].(string)

	get := func(by, id string) error {
		_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountEventGet(b.ctx, db.AccountEventGetParams{AccessID: by, ID: id})
		})
		return err
	}
	del := func(by, id string) error {
		_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountEventDelete(b.ctx, db.AccountEventDeleteParams{AccessID: by, ID: id})
		})
		return err
	}
	create := func(by, streams string) error {
		_, err := b.event(t, by, `{"streamIds": `+streams+`, "type": "series:mass/kg"}`)
		return err
	}

	for _, tc := range []struct {
		name, by, streams string
		code              string // "" allowed
	}{
		{"personal", b.personal, `["ecg"]`, ""},
		{"reader", reader, `["ecg"]`, "SAFRB"},
		{"contributor in a descendant", contributor, `["ecg"]`, ""},
		{"contributor elsewhere", contributor, `["work"]`, "SAFRB"},
		{"contributor in one of two", contributor, `["ecg", "work"]`, "SAFRB"},
		{"create-only", creator, `["heart"]`, ""},
		{"create-only elsewhere", creator, `["diary"]`, "SAFRB"},
		{"star", star, `["diary"]`, ""},
		{"star, nearer read", star, `["work"]`, "SAFRB"},
		{"manager, nearer read", manager, `["ecg"]`, "SAFRB"},
		{"manager", manager, `["heart"]`, ""},
	} {
		err := create(tc.by, tc.streams)
		if tc.code == "" {
			require.NoError(t, err, tc.name)
		} else {
			accountCode(t, err, tc.code)
		}
	}

	// Reading needs read on one stream; create-only reads nothing.
	require.NoError(t, get(reader, both))
	require.NoError(t, get(contributor, both))
	require.NoError(t, get(star, both))
	accountCode(t, get(creator, both), "SAFRB")
	require.Empty(t, b.events(t, db.AccountEventsGetParams{AccessID: creator, IncludeSeries: true}))
	require.NotEmpty(t, b.events(t, db.AccountEventsGetParams{AccessID: contributor, IncludeSeries: true}))

	// Deleting needs contribute on every stream.
	accountCode(t, del(reader, both), "SAFRB")
	accountCode(t, del(contributor, both), "SAFRB")
	accountCode(t, del(creator, both), "SAFRB")
	accountCode(t, del(star, both), "SAFRB") // read only on work
	require.NoError(t, del(b.personal, both))
}

func TestAccountEventsGet(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	ids := map[string]string{}
	for _, e := range []struct{ name, body string }{
		{"note", `{"streamId": "diary", "type": "note/txt", "content": "n", "time": 100}`},
		{"mass", `{"streamId": "heart", "type": "mass/kg", "content": 70, "time": 200}`},
		{"period", `{"streamId": "ecg", "type": "activity/plain", "time": 300, "duration": 100}`},
		{"work", `{"streamId": "work", "type": "note/txt", "content": "w", "time": 500}`},
		{"series", `{"streamId": "heart", "type": "series:mass/kg", "time": 250}`},
		{"gps", `{"streamId": "ecg", "type": "series:position/wgs84", "time": 260}`},
		{"trashed", `{"streamId": "diary", "type": "note/txt", "content": "t", "time": 600, "trashed": true}`},
	} {
		out, err := b.event(t, b.personal, e.body)
		require.NoError(t, err, e.name)
		ids[e.name] = out["event"].(map[string]any)["id"].(string)
	}
	names := func(list []map[string]any) []string {
		byID := map[string]string{}
		for n, id := range ids {
			byID[id] = n
		}
		out := []string{}
		for _, id := range eventIDs(list) {
			out = append(out, byID[id])
		}
		return out
	}
	p := func(f func(*db.AccountEventsGetParams)) []string {
		arg := db.AccountEventsGetParams{AccessID: b.personal}
		f(&arg)
		return names(b.events(t, arg))
	}
	none := func(*db.AccountEventsGetParams) {}
	require.Equal(t, []string{"work", "period", "mass", "note"}, p(none), "newest first, series left out")
	require.Equal(t, []string{"note", "mass", "series", "gps", "period", "work"}, p(func(a *db.AccountEventsGetParams) {
		a.IncludeSeries, a.SortAscending = true, true
	}))
	require.Equal(t, []string{"gps", "series"}, p(func(a *db.AccountEventsGetParams) { a.Types = []string{"series:*"} }))
	require.Equal(t, []string{"series"}, p(func(a *db.AccountEventsGetParams) { a.Types = []string{"series:mass/*"} }))
	require.Equal(t, []string{"series"}, p(func(a *db.AccountEventsGetParams) { a.Types = []string{"series:mass/kg"} }))
	require.Equal(t, []string{"mass"}, p(func(a *db.AccountEventsGetParams) { a.Types = []string{"mass/*"} }))
	require.Equal(t, []string{"series", "mass"}, p(func(a *db.AccountEventsGetParams) { a.Types, a.IncludeSeries = []string{"mass/kg"}, true }))
	require.Equal(t, []string{"work", "note"}, p(func(a *db.AccountEventsGetParams) { a.Types = []string{"note/txt"} }))
	require.Equal(t, []string{"period", "mass"}, p(func(a *db.AccountEventsGetParams) { a.Streams = []string{"heart"} }), "a stream with its descendants")
	require.Equal(t, []string{"period"}, p(func(a *db.AccountEventsGetParams) { a.Streams = []string{"ecg"} }))
	require.Equal(t, []string{"period", "mass"}, p(func(a *db.AccountEventsGetParams) { a.FromTime, a.ToTime = ptr(150.0), ptr(450.0) }))
	require.Equal(t, []string{"period"}, p(func(a *db.AccountEventsGetParams) { a.FromTime, a.ToTime = ptr(350.0), ptr(360.0) }), "a period that overlaps")
	require.Equal(t, []string{"trashed"}, p(func(a *db.AccountEventsGetParams) { a.State = "trashed" }))
	require.Equal(t, []string{"trashed", "work", "period", "mass", "note"}, p(func(a *db.AccountEventsGetParams) { a.State = "all" }))
	require.Equal(t, []string{"period", "mass"}, p(func(a *db.AccountEventsGetParams) { a.Skip, a.MaxEvents = 1, ptr(int32(2)) }))

	// Without limit or time range, the default limit (silo.settings account.events_default_limit).
	_, err := b.tx.Exec(b.ctx, `UPDATE silo.settings SET value = '2' WHERE key = 'account.events_default_limit'`)
	require.NoError(t, err)
	require.Equal(t, []string{"work", "period"}, p(none))
	require.Len(t, p(func(a *db.AccountEventsGetParams) { a.FromTime = ptr(0.0) }), 4)

	// An app access sees what it may read.
	reader, err := b.app(t, b.personal, `{"name": "r", "permissions": [{"streamId": "heart", "level": "read"}]}`)
	require.NoError(t, err)
	require.Equal(t, []string{"period", "gps", "series", "mass"}, names(b.events(t, db.AccountEventsGetParams{AccessID: reader, IncludeSeries: true, FromTime: ptr(0.0)})))
	require.Empty(t, names(b.events(t, db.AccountEventsGetParams{AccessID: reader, Streams: []string{"work"}})))

	for _, tc := range []struct {
		arg  db.AccountEventsGetParams
		code string
	}{
		{db.AccountEventsGetParams{State: "gone"}, "SAINV"},
		{db.AccountEventsGetParams{State: "default", Types: []string{"mass"}}, "SAINV"},
		{db.AccountEventsGetParams{State: "default", Types: []string{"*"}}, "SAINV"},
		{db.AccountEventsGetParams{State: "default", MaxEvents: ptr(int32(-1))}, "SAINV"},
		{db.AccountEventsGetParams{State: "default", Streams: []string{"nowhere"}}, "SAREF"},
	} {
		tc.arg.AccessID = b.personal
		_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) { return q.AccountEventsGet(b.ctx, tc.arg) })
		accountCode(t, err, tc.code)
	}
}

// Every change of an event is published on the user's channel, for that user's accesses only.
func TestAccountEventChanges(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	out, err := b.event(t, b.personal, `{"streamId": "diary", "type": "note/txt", "content": "x"}`)
	require.NoError(t, err)
	id := out["event"].(map[string]any)["id"].(string)
	_, err = b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountEventUpdate(b.ctx, db.AccountEventUpdateParams{AccessID: b.personal, ID: id, Update: json.RawMessage(`{"content": "y"}`)})
	})
	require.NoError(t, err)
	for range 2 {
		_, err = b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountEventDelete(b.ctx, db.AccountEventDeleteParams{AccessID: b.personal, ID: id})
		})
		require.NoError(t, err)
	}
	rows, err := b.tx.Query(b.ctx, `SELECT channel, kind, payload->>'id', readers FROM api.changes_pending() WHERE channel LIKE 'account:%' ORDER BY pending_id`)
	require.NoError(t, err)
	type change struct {
		channel, kind, id string
		readers           []string
	}
	var got []change
	for rows.Next() {
		var c change
		require.NoError(t, rows.Scan(&c.channel, &c.kind, &c.id, &c.readers))
		got = append(got, c)
	}
	require.NoError(t, rows.Err())
	var events []change
	for _, c := range got {
		require.Equal(t, []string{"account:alice"}, c.readers)
		if c.channel == "account:alice:events" {
			events = append(events, c)
		} else {
			require.Equal(t, "account:alice:streams", c.channel)
		}
	}
	require.Equal(t, []change{
		{"account:alice:events", "created", id, []string{"account:alice"}},
		{"account:alice:events", "updated", id, []string{"account:alice"}},
		{"account:alice:events", "trashed", id, []string{"account:alice"}},
		{"account:alice:events", "deleted", id, []string{"account:alice"}},
	}, events)
}

// The series routes find a holder as Pryv's HF server does: one stream with the right is enough,
// create-only may write, and it must be a live series event. A deleted holder's series is recorded
// for removal.
func TestAccountSeriesHolderLookup(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	creator, err := b.app(t, b.personal, `{"name": "c", "permissions": [{"streamId": "heart", "level": "create-only"}]}`)
	require.NoError(t, err)
	reader, err := b.app(t, b.personal, `{"name": "r", "permissions": [{"streamId": "work", "level": "read"}]}`)
	require.NoError(t, err)
	out, err := b.event(t, b.personal, `{"streamIds": ["ecg", "work"], "type": "series:mass/kg"}`)
	require.NoError(t, err)
	holder := out["event"].(map[string]any)["id"].(string)
	out, err = b.event(t, b.personal, `{"streamIds": ["ecg"], "type": "note/txt"}`)
	require.NoError(t, err)
	note := out["event"].(map[string]any)["id"].(string)

	lookup := func(by, id, action string) (int64, error) {
		var series int64
		err := dbtest.Savepoint(t, b.tx, func(tx pgx.Tx) error {
			return tx.QueryRow(b.ctx, `SELECT (account_private.series_holder(account_private.access($1), $2, $3)).series_id`, by, id, action).Scan(&series)
		})
		return series, err
	}
	series, err := lookup(creator, holder, "create")
	require.NoError(t, err, "create-only on one of its streams may add points")
	require.Positive(t, series)
	_, err = lookup(creator, holder, "read")
	accountCode(t, err, "SAFRB")
	_, err = lookup(reader, holder, "read")
	require.NoError(t, err, "read on one of its streams is enough")
	_, err = lookup(reader, holder, "create")
	accountCode(t, err, "SAFRB")
	_, err = lookup(b.personal, note, "create")
	accountCode(t, err, "SAOPR")
	_, err = lookup(b.personal, "cnosuchevent0000000000000", "read")
	accountCode(t, err, "SANFD")

	del := func() {
		_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.AccountEventDelete(b.ctx, db.AccountEventDeleteParams{AccessID: b.personal, ID: holder})
		})
		require.NoError(t, err)
	}
	del()
	_, err = lookup(b.personal, holder, "create")
	accountCode(t, err, "SAOPR") // trashed
	var n int
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM account.series_deletions`).Scan(&n))
	require.Equal(t, 0, n, "a trashed holder keeps its series")
	del()
	_, err = lookup(b.personal, holder, "create")
	accountCode(t, err, "SANFD")
	var recorded string
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT event_id FROM account.series_deletions WHERE series_id = $1`, series).Scan(&recorded))
	require.Equal(t, holder, recorded)

	// A user's deletion takes its series along, recorded too.
	out, err = b.event(t, b.personal, `{"streamIds": ["ecg"], "type": "series:ratio/generic"}`)
	require.NoError(t, err)
	_, err = b.tx.Exec(b.ctx, `DELETE FROM account.users WHERE username = 'alice'`)
	require.NoError(t, err)
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM account.series_deletions`).Scan(&n))
	require.Equal(t, 2, n)
}
