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

// How api.series_append_columns reads its body numbers: bodies in order (each body's points
// together, one body after the other, its times ascending) take the fast way, any other order
// the sorted one; both store the same points, and body numbers that name no body, or a body
// without points, are refused.
func TestSeriesColumnsBodyNumbers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := db.New(dbtest.Pool(t))
	user, holder := storeUser(t, q, "bodynumbers")
	at := time.Now().Add(-time.Hour).Truncate(time.Second)
	a, b, c := holder(at), holder(at), holder(at)
	call := func(body []int32, times ...int64) error {
		p := db.SeriesAppendColumnsParams{AccessID: user.AccessID, Batch: true, EventIds: []string{a, b, c},
			Fields: []string{"deltaTime", "value", "deltaTime", "value", "deltaTime", "value"}, FieldCounts: []int32{2, 2, 2},
			Scales: []int16{0, 0, 0, 0, 0, 0}, Body: body}
		for i, s := range times {
			p.Time = append(p.Time, s*1000000)
			p.V1 = append(p.V1, int64(100*body[i])+s)
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

	// In order.
	require.NoError(t, call([]int32{1, 1, 2, 3, 3}, 1, 2, 1, 1, 2))
	// Bodies interleaved, a body's times descending: the same rules, sorted.
	require.NoError(t, call([]int32{3, 1, 2, 1}, 3, 4, 3, 3))
	require.NoError(t, call([]int32{2, 2, 1, 3}, 5, 4, 5, 4))
	require.JSONEq(t, `[[1, 101], [2, 102], [3, 103], [4, 104], [5, 105]]`, points(a))
	require.JSONEq(t, `[[1, 201], [3, 203], [4, 204], [5, 205]]`, points(b))
	require.JSONEq(t, `[[1, 301], [2, 302], [3, 303], [4, 304]]`, points(c))

	for _, bad := range []struct {
		body  []int32
		times []int64
		want  string
	}{
		{[]int32{1, 2, 4}, []int64{9, 9, 9}, "SAINV: series columns: a body number is between 1 and 3"},
		{[]int32{0, 1, 2, 3}, []int64{9, 9, 9, 9}, "SAINV: series columns: a body number is between 1 and 3"},
		{[]int32{1, 3}, []int64{9, 9}, `SASTR: data[1]: "points" must hold at least one data point.`},
		{[]int32{1, 1, 3, 3}, []int64{9, 10, 9, 10}, `SASTR: data[1]: "points" must hold at least one data point.`},
		{[]int32{3, 1}, []int64{9, 9}, `SASTR: data[1]: "points" must hold at least one data point.`},
		{[]int32{1, 2}, []int64{9, 9}, `SASTR: data[2]: "points" must hold at least one data point.`},
	} {
		require.Equal(t, bad.want, state(call(bad.body, bad.times...)), "%v", bad.body)
	}
	require.JSONEq(t, `[[1, 101], [2, 102], [3, 103], [4, 104], [5, 105]]`, points(a), "nothing of a refused call is stored")
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
