package db_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

// seriesHolder creates a series holder of the given type in stream heart at time 1000 and
// returns its id.
func (b *accountBundle) seriesHolder(t *testing.T, typ string) string {
	t.Helper()
	out, err := b.event(t, b.personal, `{"streamIds": ["heart"], "type": "series:`+typ+`", "time": 1000}`)
	require.NoError(t, err)
	return out["event"].(map[string]any)["id"].(string)
}

func (b *accountBundle) seriesAppend(t *testing.T, by, id, data string) error {
	_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.SeriesAppend(b.ctx, db.SeriesAppendParams{AccessID: by, EventID: id, Data: json.RawMessage(data)})
	})
	return err
}

func (b *accountBundle) seriesGet(t *testing.T, by, id string, p db.SeriesGetParams) (map[string]any, error) {
	p.AccessID, p.EventID = by, id
	if p.TimeField == "" {
		p.TimeField = "deltaTime"
	}
	var out map[string]any
	_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		raw, err := q.SeriesGet(b.ctx, p)
		if err == nil {
			d := json.NewDecoder(strings.NewReader(string(raw)))
			d.UseNumber()
			err = d.Decode(&out)
		}
		return json.RawMessage(`{}`), err
	})
	return out, err
}

// points gives the points of a read as JSON text, so numbers compare as written.
func seriesPoints(t *testing.T, out map[string]any) string {
	t.Helper()
	raw, err := json.Marshal(out["points"])
	require.NoError(t, err)
	return string(raw)
}

func TestSeriesAppendValidation(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "position/wgs84")
	for _, c := range []struct{ name, body, msg string }{
		{"not an object", `[1]`, "flatJSON structure must be an object."},
		{"format missing", `{"fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 2]]}`, `"format" field must contain the string "flatJSON".`},
		{"format wrong", `{"format": "csv", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 2]]}`, `"format" field must contain`},
		{"fields not a list", `{"format": "flatJSON", "fields": "deltaTime", "points": []}`, "Field names must be a list."},
		{"fields null", `{"format": "flatJSON", "fields": null, "points": []}`, "Field names must be a list."},
		{"field not a string", `{"format": "flatJSON", "fields": ["deltaTime", 1], "points": []}`, "Field names must be strings."},
		{"points not a list", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": {}}`, `"points" field must be a list of data points.`},
		{"unknown field", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude", "depth"], "points": [[0, 1, 2, 3]]}`, `"fields" field must contain valid field names`},
		{"duplicate field", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude", "latitude"], "points": [[0, 1, 2, 3]]}`, `"fields" field must contain valid field names`},
		{"two time columns", `{"format": "flatJSON", "fields": ["deltaTime", "timestamp", "latitude", "longitude"], "points": [[0, 1000, 1, 2]]}`, `"fields" field must contain valid field names`},
		{"no time column", `{"format": "flatJSON", "fields": ["latitude", "longitude"], "points": [[1, 2]]}`, `"fields" field must contain valid field names`},
		{"required field missing", `{"format": "flatJSON", "fields": ["deltaTime", "latitude"], "points": [[0, 1]]}`, `"fields" field must contain valid field names`},
		{"empty points", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": []}`, `"points" must hold at least one data point.`},
		{"ragged row", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 2], [1, 2]]}`, "point 2: a point must have 3 values"},
		{"row not an array", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [{"a": 1}]}`, "point 1: a point must be an array"},
		{"string not a number", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, "north", 2]]}`, "field latitude must be a number"},
		{"boolean not a number", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, true, 2]]}`, "field latitude must be a number"},
		{"null in required", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, null, 2]]}`, "field latitude is required"},
		{"negative deltaTime", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[-1, 1, 2]]}`, "out of range"},
		{"timestamp before the event", `{"format": "flatJSON", "fields": ["timestamp", "latitude", "longitude"], "points": [[999, 1, 2]]}`, "out of range"},
		{"time not a number", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [["soon", 1, 2]]}`, "deltaTime must be a number"},
		{"number beyond double", `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1e400, 2]]}`, "out of range"},
	} {
		err := b.seriesAppend(t, b.personal, id, c.body)
		accountCode(t, err, "SASTR")
		require.Contains(t, err.Error(), c.msg, c.name)
	}
	// Nothing of a refused body is stored.
	out, err := b.seriesGet(t, b.personal, id, db.SeriesGetParams{Relative: true})
	require.NoError(t, err)
	require.Equal(t, "[]", seriesPoints(t, out))
}

func TestSeriesAppendRoundTrip(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "position/wgs84")
	// deltaTime (Pryv as shipped), optional fields absent or null, numbers as strings.
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude", "altitude"],
		"points": [[0, 46.51, 6.63, null], [0.001, "-12.340", 0.30000000000000004, 1e300], [2.5, 1e-21, 123456789012345678, 5]]}`))
	// timestamp (the seed): seconds since the epoch, 1000 being the event's time.
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["timestamp", "longitude", "latitude"], "points": [[1010.25, 7, 8]]}`))
	out, err := b.seriesGet(t, b.personal, id, db.SeriesGetParams{Relative: true})
	require.NoError(t, err)
	require.Equal(t, []any{"deltaTime", "latitude", "longitude", "altitude", "horizontalAccuracy", "verticalAccuracy", "speed", "bearing"}, out["fields"])
	// jsonb (api.series_get) writes numbers in plain decimals: 1e300 and 1e-21 in full.
	require.Equal(t, `[[0,46.51,6.63,null,null,null,null,null],`+
		`[0.001,-12.34,0.30000000000000004,1`+strings.Repeat("0", 300)+`,null,null,null,null],`+
		`[2.5,0.`+strings.Repeat("0", 20)+`1,123456789012345678,5,null,null,null,null],`+
		`[10.25,8,7,null,null,null,null,null]]`, seriesPoints(t, out))

	// Last write wins, in the stored series and within one body.
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 1], [0, 2, 2]]}`))
	from, to := 0.0, 0.002
	out, err = b.seriesGet(t, b.personal, id, db.SeriesGetParams{Relative: true, FromTime: &from, ToTime: &to, Fields: []string{"longitude"}})
	require.NoError(t, err)
	require.Equal(t, []any{"deltaTime", "longitude"}, out["fields"])
	require.Equal(t, `[[0,2],[0.001,0.30000000000000004]]`, seriesPoints(t, out))

	// Absolute range and the timestamp column; to is exclusive.
	fromAbs, toAbs := 1000.001, 1010.25
	out, err = b.seriesGet(t, b.personal, id, db.SeriesGetParams{FromTime: &fromAbs, ToTime: &toAbs, Fields: []string{"timestamp", "latitude"}})
	require.NoError(t, err)
	require.Equal(t, `[[1000.001,-12.34],[1002.5,0.`+strings.Repeat("0", 20)+`1]]`, seriesPoints(t, out))
}

func TestSeriesAppendKinds(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	music := b.seriesHolder(t, "music/basic")
	require.NoError(t, b.seriesAppend(t, b.personal, music, `{"format": "flatJSON", "fields": ["deltaTime", "title", "year", "track"],
		"points": [[1, "Abbey Road", 1969, "7"], [2, 42, null, 1.0]]}`))
	out, err := b.seriesGet(t, b.personal, music, db.SeriesGetParams{Relative: true, Fields: []string{"title", "year", "track"}})
	require.NoError(t, err)
	require.Equal(t, `[[1,"Abbey Road",7,1969],[2,"42",1,null]]`, seriesPoints(t, out))
	err = b.seriesAppend(t, b.personal, music, `{"format": "flatJSON", "fields": ["deltaTime", "year"], "points": [[1, 1969.5]]}`)
	accountCode(t, err, "SASTR")
	require.Contains(t, err.Error(), "field year must be an integer")
	err = b.seriesAppend(t, b.personal, music, `{"format": "flatJSON", "fields": ["deltaTime", "title"], "points": [[1, {"a": 1}]]}`)
	accountCode(t, err, "SASTR")
	require.Contains(t, err.Error(), "field title must be a string")
}

func TestSeriesHolderRules(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "mass/kg")
	body := `{"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 70.5]]}`
	accountCode(t, b.seriesAppend(t, b.personal, "cmissingmissingmissing000", body), "SANFD")
	note, err := b.event(t, b.personal, `{"streamIds": ["heart"], "type": "note/txt", "content": "x"}`)
	require.NoError(t, err)
	accountCode(t, b.seriesAppend(t, b.personal, note["event"].(map[string]any)["id"].(string), body), "SAOPR")
	accountCode(t, b.seriesAppend(t, "cnosuchaccess000000000000", id, body), "SAAUT")

	// Per access kind: create-only writes but does not read; read reads but does not write;
	// a permission on one of the event's streams is enough.
	createOnly, err := b.app(t, b.personal, `{"name": "sensor", "permissions": [{"streamId": "heart", "level": "create-only"}]}`)
	require.NoError(t, err)
	reader, err := b.app(t, b.personal, `{"name": "viewer", "permissions": [{"streamId": "diary", "level": "read"}]}`)
	require.NoError(t, err)
	stranger, err := b.app(t, b.personal, `{"name": "other", "permissions": [{"streamId": "work", "level": "manage"}]}`)
	require.NoError(t, err)
	require.NoError(t, b.seriesAppend(t, createOnly, id, body))
	_, err = b.seriesGet(t, createOnly, id, db.SeriesGetParams{Relative: true})
	accountCode(t, err, "SAFRB")
	out, err := b.seriesGet(t, reader, id, db.SeriesGetParams{Relative: true})
	require.NoError(t, err)
	require.Equal(t, `[[0,70.5]]`, seriesPoints(t, out))
	accountCode(t, b.seriesAppend(t, reader, id, body), "SAFRB")
	accountCode(t, b.seriesAppend(t, stranger, id, body), "SAFRB")

	// A trashed holder takes no points; deleted and created again with its id, it holds a new,
	// empty series, and the old one's points go with api.series_cleanup.
	_, err = b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountEventDelete(b.ctx, db.AccountEventDeleteParams{AccessID: b.personal, ID: id})
	})
	require.NoError(t, err)
	err = b.seriesAppend(t, b.personal, id, body)
	accountCode(t, err, "SAOPR")
	require.Contains(t, err.Error(), "trashed")
	_, err = b.call(t, func(q *db.Queries) (json.RawMessage, error) {
		return q.AccountEventDelete(b.ctx, db.AccountEventDeleteParams{AccessID: b.personal, ID: id})
	})
	require.NoError(t, err)
	_, err = b.event(t, b.personal, `{"id": "`+id+`", "streamIds": ["heart"], "type": "series:mass/kg", "time": 1000}`)
	require.NoError(t, err)
	out, err = b.seriesGet(t, b.personal, id, db.SeriesGetParams{Relative: true})
	require.NoError(t, err)
	require.Equal(t, `[]`, seriesPoints(t, out))
	var left int
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM series.points_all`).Scan(&left))
	require.Equal(t, 1, left)
	removed, err := b.q.SeriesCleanup(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, int32(1), removed)
	require.NoError(t, b.tx.QueryRow(b.ctx, `SELECT count(*) FROM series.points_all`).Scan(&left))
	require.Equal(t, 0, left)
}

func TestSeriesAppendBatch(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	mass, pos := b.seriesHolder(t, "mass/kg"), b.seriesHolder(t, "position/wgs84")
	batch := func(data string) error {
		_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			return q.SeriesAppendBatch(b.ctx, db.SeriesAppendBatchParams{AccessID: b.personal, Batch: json.RawMessage(data)})
		})
		return err
	}
	require.NoError(t, batch(`{"format": "seriesBatch", "data": []}`))
	require.NoError(t, batch(`{"format": "seriesBatch", "data": [
		{"eventId": "`+mass+`", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[0, 1], [1, 2]]}},
		{"eventId": "`+pos+`", "data": {"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 2]]}}]}`))
	// All or nothing: the second operation is refused, the first is not written either.
	err := batch(`{"format": "seriesBatch", "data": [
		{"eventId": "` + mass + `", "data": {"format": "flatJSON", "fields": ["deltaTime", "value"], "points": [[5, 5]]}},
		{"eventId": "` + pos + `", "data": {"format": "flatJSON", "fields": ["deltaTime", "latitude"], "points": [[5, 1]]}}]}`)
	accountCode(t, err, "SASTR")
	require.Contains(t, err.Error(), "data[1]: ")
	out, err := b.seriesGet(t, b.personal, mass, db.SeriesGetParams{Relative: true})
	require.NoError(t, err)
	require.Equal(t, `[[0,1],[1,2]]`, seriesPoints(t, out))
	for _, bad := range []string{`[]`, `{"format": "flatJSON", "data": []}`, `{"format": "seriesBatch", "data": {}}`,
		`{"format": "seriesBatch", "data": [1]}`, `{"format": "seriesBatch", "data": [{"data": {}}]}`} {
		accountCode(t, batch(bad), "SASTR")
	}
	accountCode(t, batch(`{"format": "seriesBatch", "data": [{"eventId": "cmissingmissingmissing000", "data": {}}]}`), "SANFD")
}

// The numbers of a field in one body are stored at one scale, the largest they need, so a feed's
// digits move by small steps (what compression encodes cheaply); one that does not fit keeps its own.
func TestSeriesAppendScale(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "mass/kg")
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "value"],
		"points": [[0, 20.1], [1, 20.15], [2, 20], [3, -0.05], [4, 1e300]]}`))
	rows, err := b.tx.Query(b.ctx, `SELECT n1, s1 FROM series.points_all ORDER BY at`)
	require.NoError(t, err)
	var got [][2]int64
	for rows.Next() {
		var n int64
		var s int16
		require.NoError(t, rows.Scan(&n, &s))
		got = append(got, [2]int64{n, int64(s)})
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [][2]int64{{2010, 2}, {2015, 2}, {2000, 2}, {-5, 2}, {1, -300}}, got)
	out, err := b.seriesGet(t, b.personal, id, db.SeriesGetParams{Relative: true})
	require.NoError(t, err)
	require.Equal(t, `[[0,20.1],[1,20.15],[2,20],[3,-0.05],[4,1`+strings.Repeat("0", 300)+`]]`, seriesPoints(t, out))
}
