package server

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

// The typed joiner: the small bodies of one access waiting together go as one call, their bodies
// renumbered one after the other; when that call fails, each body is written alone, so that only
// the one at fault fails; another access's bodies are a call of their own.
func TestColumnsJoiner(t *testing.T) {
	var calls []db.SeriesAppendColumnsParams
	j := &columnsJoiner{queue: make(chan *columnsItem, 16), call: func(_ context.Context, p db.SeriesAppendColumnsParams) error {
		calls = append(calls, p)
		for _, e := range p.EventIds {
			if e == "bad" {
				return &pgconn.PgError{Code: "SASTR"}
			}
		}
		return nil
	}}
	one := func(event string, values ...int64) *seriesColumns {
		c := &seriesColumns{events: []string{event}, fields: []string{"deltaTime", "value"}, counts: []int32{2}, scales: []int16{0, 2}}
		for i, v := range values {
			c.time = append(c.time, int64(i)*1000000)
			c.v[0] = append(c.v[0], v)
		}
		return c
	}
	// A seriesBatch of two bodies, the second with a second value column.
	batch := &seriesColumns{events: []string{"b1", "b2"}, fields: []string{"deltaTime", "value", "deltaTime", "value", "other"},
		counts: []int32{2, 3}, scales: []int16{0, 1, 0, 1, 0}, points: []int32{1, 2}, time: []int64{0, 0, 1000000},
		v: [8][]int64{{1, 2, 3}, {nullCell, 7, 8}}, batch: true}
	items := []*columnsItem{
		{access: "a", c: one("e1", 10, 11)},
		{access: "b", c: one("x", 5)},
		{access: "a", c: batch},
		{access: "a", c: one("e3", 12)},
	}
	for _, it := range items {
		it.reply = make(chan error, 1)
		j.queue <- it
	}
	close(j.queue)
	j.run()
	for _, it := range items {
		require.NoError(t, <-it.reply)
	}
	require.Len(t, calls, 2, "one call per access")
	a := calls[0]
	require.Equal(t, "a", a.AccessID)
	require.Equal(t, []string{"e1", "b1", "b2", "e3"}, a.EventIds)
	require.Equal(t, []int32{2, 2, 3, 2}, a.FieldCounts)
	require.Equal(t, []string{"deltaTime", "value", "deltaTime", "value", "deltaTime", "value", "other", "deltaTime", "value"}, a.Fields)
	require.Equal(t, []int32{2, 1, 2, 1}, a.Points, "the points of each body")
	require.Equal(t, []int64{0, 1000000, 0, 0, 1000000, 0}, a.Time)
	require.Equal(t, []int64{10, 11, 1, 2, 3, 12}, a.V1)
	require.Equal(t, []int64{nullCell, nullCell, nullCell, 7, 8, nullCell}, a.V2)
	require.Nil(t, a.V3)
	require.True(t, a.Batch)
	require.Equal(t, "b", calls[1].AccessID)
	require.Nil(t, calls[1].Points, "a body alone goes as it came")

	// A joined call that fails: each body again on its own, only the one at fault fails.
	calls = nil
	j.queue = make(chan *columnsItem, 16)
	items = []*columnsItem{{access: "a", c: one("e1", 1)}, {access: "a", c: one("bad", 2)}, {access: "a", c: one("e2", 3)}}
	for _, it := range items {
		it.reply = make(chan error, 1)
		j.queue <- it
	}
	close(j.queue)
	j.run()
	require.NoError(t, <-items[0].reply)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(<-items[1].reply, &pgErr))
	require.Equal(t, "SASTR", pgErr.Code)
	require.NoError(t, <-items[2].reply)
	require.Len(t, calls, 4, "the joined call, then each body alone")
	require.Equal(t, []string{"e1", "bad", "e2"}, calls[0].EventIds)
	for i, e := range []string{"e1", "bad", "e2"} {
		require.Equal(t, []string{e}, calls[i+1].EventIds)
	}
}
