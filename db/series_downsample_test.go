package db_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

func TestSeriesDownsample(t *testing.T) {
	t.Parallel()
	b := accountSetup(t)
	b.tree(t)
	id := b.seriesHolder(t, "position/wgs84")
	require.NoError(t, b.seriesAppend(t, b.personal, id, `{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude", "speed"],
		"points": [[0, 1.5, 10, null], [5, 2.5, 20, 3], [9.999, 3, 30, null], [10, 7, -1, 1], [25, 8, -2, 2]]}`))
	down := func(interval float64, aggregate string, p db.SeriesDownsampleParams) (string, []any, error) {
		p.AccessID, p.EventID, p.IntervalSeconds, p.Aggregate = b.personal, id, interval, aggregate
		if p.TimeField == "" {
			p.TimeField = "deltaTime"
		}
		var out struct {
			Fields []any
			Points json.RawMessage
		}
		_, err := b.call(t, func(q *db.Queries) (json.RawMessage, error) {
			raw, err := q.SeriesDownsample(b.ctx, p)
			if err == nil {
				err = json.Unmarshal(raw, &out)
			}
			return json.RawMessage(`{}`), err
		})
		return string(out.Points), out.Fields, err
	}
	all := []string{"latitude", "longitude", "speed"}
	points, fields, err := down(10, "avg", db.SeriesDownsampleParams{Relative: true, Fields: all})
	require.NoError(t, err)
	require.Equal(t, []any{"deltaTime", "latitude", "longitude", "speed"}, fields)
	require.Equal(t, `[[0, 2.3333333333333333, 20, 3], [10, 7, -1, 1], [20, 8, -2, 2]]`, points)
	points, _, err = down(10, "max", db.SeriesDownsampleParams{Relative: true, Fields: []string{"latitude"}})
	require.NoError(t, err)
	require.Equal(t, `[[0, 3], [10, 7], [20, 8]]`, points)
	points, _, err = down(20, "count", db.SeriesDownsampleParams{Relative: true, Fields: []string{"speed"}})
	require.NoError(t, err)
	require.Equal(t, `[[0, 2], [20, 1]]`, points)
	points, _, err = down(20, "first", db.SeriesDownsampleParams{Relative: true, Fields: []string{"speed"}})
	require.NoError(t, err)
	require.Equal(t, `[[0, 3], [20, 2]]`, points)
	points, _, err = down(20, "last", db.SeriesDownsampleParams{Relative: true, Fields: []string{"latitude"}})
	require.NoError(t, err)
	require.Equal(t, `[[0, 7], [20, 8]]`, points)
	// Absolute buckets and range: the event's time is 1000.
	from := 1005.0
	points, fields, err = down(10, "sum", db.SeriesDownsampleParams{FromTime: &from, TimeField: "timestamp", Fields: []string{"longitude"}})
	require.NoError(t, err)
	require.Equal(t, []any{"timestamp", "longitude"}, fields)
	require.Equal(t, `[[1000, 50], [1010, -1], [1020, -2]]`, points)

	for _, c := range []struct {
		interval  float64
		aggregate string
	}{{0, "avg"}, {-1, "avg"}, {10, "median"}} {
		_, _, err := down(c.interval, c.aggregate, db.SeriesDownsampleParams{Relative: true})
		accountCode(t, err, "SAINV")
	}
}
