package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// How api.series_append_columns reads its point counts: each body's points together, the bodies
// in order. A call whose bodies' times ascend takes the fast way, any other the sorted one; both
// store the same points. Counts that do not add up to the points, and a body without points, are
// refused.
func TestSeriesColumnsPointCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := db.New(dbtest.Pool(t))
	user, holder := storeUser(t, q, "pointcounts")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	a, b, c := holder(at), holder(at), holder(at)
	call := func(points []int32, times ...int64) error {
		p := db.SeriesAppendColumnsParams{AccessID: user.AccessID, Batch: true, EventIds: []string{a, b, c},
			Fields: []string{"deltaTime", "value", "deltaTime", "value", "deltaTime", "value"}, FieldCounts: []int32{2, 2, 2},
			Scales: []int16{0, 0, 0, 0, 0, 0}, Points: points}
		body := int32(0)
		left := int32(0)
		for _, s := range times {
			for left == 0 && int(body) < len(points) {
				left = points[body]
				body++
			}
			left--
			p.Time = append(p.Time, s*1000000)
			p.V1 = append(p.V1, int64(100*body)+s)
		}
		_, err := q.SeriesAppendColumns(ctx, p)
		return err
	}
	points := func(id string) string { return string(storedPoints[json.RawMessage](t, q, user.AccessID, id)) }
	state := func(err error) string {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return pgErr.Code + ": " + pgErr.Message
		}
		return ""
	}

	// In order: each body's times ascending, whatever the times of the body before.
	require.NoError(t, call([]int32{2, 1, 2}, 1, 2, 1, 1, 2))
	// A body's times descending, or twice the same: the same rules, sorted (the later point wins).
	require.NoError(t, call([]int32{1, 1, 2}, 4, 3, 4, 3))
	require.NoError(t, call([]int32{2, 1, 1}, 5, 5, 5, 4))
	require.JSONEq(t, `[[1, 101], [2, 102], [4, 104], [5, 105]]`, points(a))
	require.JSONEq(t, `[[1, 201], [3, 203], [5, 205]]`, points(b))
	require.JSONEq(t, `[[1, 301], [2, 302], [3, 303], [4, 304]]`, points(c))

	const counts = "SAINV: series columns: one field count and one point count per event (the points in all), one scale per field"
	for _, bad := range []struct {
		points []int32
		times  []int64
		want   string
	}{
		{[]int32{1, 1}, []int64{9, 9}, counts},
		{[]int32{1, 1, 2}, []int64{9, 9, 9}, counts},
		{[]int32{2, -1, 2}, []int64{9, 9, 9}, counts},
		{[]int32{1, 0, 1}, []int64{9, 9}, `SASTR: data[1]: "points" must hold at least one data point.`},
		{[]int32{0, 1, 1}, []int64{9, 9}, `SASTR: data[0]: "points" must hold at least one data point.`},
		{[]int32{1, 1, 0}, []int64{9, 9}, `SASTR: data[2]: "points" must hold at least one data point.`},
	} {
		require.Equal(t, bad.want, state(call(bad.points, bad.times...)), "%v", bad.points)
	}
	require.JSONEq(t, `[[1, 101], [2, 102], [4, 104], [5, 105]]`, points(a), "nothing of a refused call is stored")
}

// Each body of a batch has its own scales, also when the bodies are alike (one type, the same
// fields: read in one statement); a scale out of range is refused, naming its body.
func TestSeriesColumnsBodyScales(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := db.New(dbtest.Pool(t))
	user, holder := storeUser(t, q, "bodyscales")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	ids := []string{holder(at), holder(at), holder(at)}
	batch := func(scales ...int16) db.SeriesAppendColumnsParams {
		var parts []db.SeriesAppendColumnsParams
		for i, s := range scales {
			parts = append(parts, valueColumns(user.AccessID, ids[i], 0, 2, 1000, s))
		}
		return valueBatch(user.AccessID, ids, parts...)
	}
	_, err := q.SeriesAppendColumns(ctx, batch(0, 1, 3))
	require.NoError(t, err)
	for i, want := range []string{`[[0, 1000], [1, 1001]]`, `[[0, 100], [1, 100.1]]`, `[[0, 1], [1, 1.001]]`} {
		require.JSONEq(t, want, string(storedPoints[json.RawMessage](t, q, user.AccessID, ids[i])), "body %d", i)
	}
	for _, bad := range []struct {
		scales []int16
		want   string
	}{
		{[]int16{2, 2, 19}, "data[2]: the scale of field value is between 0 and 18"},
		{[]int16{2, -1, 2}, "data[1]: the scale of field value is between 0 and 18"},
		{[]int16{19, 2, 2}, "data[0]: the scale of field value is between 0 and 18"},
	} {
		_, err := q.SeriesAppendColumns(ctx, batch(bad.scales...))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "%v", bad.scales)
		require.Equal(t, "SAINV", pgErr.Code)
		require.Equal(t, bad.want, pgErr.Message)
	}
}
