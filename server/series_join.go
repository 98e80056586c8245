package server

import (
	"context"
	"math"

	"github.com/silo-db/silo/db"
)

// Joining typed series appends: group commit for the bodies read as columns, as the joiner does for
// the JSON write routes (join.go). A sensor's requests of a thousand points wait on their commit's
// WAL flush about as long as PostgreSQL works on them, so small bodies of one access that arrive
// while others are written go as one call of api.series_append_columns, their bodies one after the
// other: one transaction, one flush. The call is all or nothing; when a joined call fails for a
// reason other than the database's, each body is written on its own, so that only the one at fault
// fails (and a body the typed path refuses goes the flatJSON way, as alone). Concurrent requests
// had no order between them: of two joined bodies that write one series at one time, the later
// one wins, as it would had it come a moment later.

// seriesColumns is a body (or a seriesBatch's bodies) read into columns: the arguments of
// api.series_append_columns.
type seriesColumns struct {
	events []string
	fields []string
	counts []int32
	scales []int16
	points []int32 // the number of points of each body, whose points come one body after the other; nil when there is one body
	time   []int64
	v      [8][]int64 // value columns; nullCell for null
	batch  bool
}

// nullCell marks a null value in a column; the query turns it into NULL. Values stay below 10^18 in
// magnitude, so it is never a value.
const nullCell = math.MinInt64

const (
	joinColumnsMaxPoints  = 5000  // a larger body is a call of its own
	joinColumnsCallPoints = 20000 // points joined into one call at most
)

type columnsJoiner struct {
	call  func(ctx context.Context, p db.SeriesAppendColumnsParams) error
	queue chan *columnsItem
}

type columnsItem struct {
	access string
	c      *seriesColumns
	reply  chan error
}

func newColumnsJoiner(call func(context.Context, db.SeriesAppendColumnsParams) error) *columnsJoiner {
	j := &columnsJoiner{call: call, queue: make(chan *columnsItem, 4096)}
	for range joinCallsAtOnce {
		go j.run()
	}
	return j
}

// do writes one body of access, joined with the small bodies of the same access waiting, and returns
// the error of the call that wrote it (its own call's when the joined one failed).
func (j *columnsJoiner) do(ctx context.Context, access string, c *seriesColumns) error {
	if len(c.time) > joinColumnsMaxPoints {
		return j.callRetrying(ctx, columnsParams(access, c))
	}
	it := &columnsItem{access: access, c: c, reply: make(chan error, 1)}
	select {
	case j.queue <- it:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-it.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (j *columnsJoiner) run() {
	points := func(it *columnsItem) int { return len(it.c.time) }
	for first := range j.queue {
		items := takeWaiting(j.queue, first, joinCallMax, joinColumnsCallPoints, points)
		for _, group := range byKey(items, func(it *columnsItem) string { return it.access }) {
			j.callGroup(group[0].access, group)
		}
	}
}

// callGroup writes the bodies of one access as one call; not in the context of one request, as the
// call serves them all.
func (j *columnsJoiner) callGroup(access string, items []*columnsItem) {
	ctx := context.Background()
	if len(items) == 1 {
		items[0].reply <- j.callRetrying(ctx, columnsParams(access, items[0].c))
		return
	}
	cs := make([]*seriesColumns, len(items))
	for i, it := range items {
		cs[i] = it.c
	}
	err := j.callRetrying(ctx, columnsParams(access, joinColumns(cs)))
	if _, down := DatabaseUnavailable(err); err == nil || down {
		for _, it := range items {
			it.reply <- err
		}
		return
	}
	for _, it := range items {
		it.reply <- j.callRetrying(ctx, columnsParams(access, it.c))
	}
}

// callRetrying makes one call (retryTransient).
func (j *columnsJoiner) callRetrying(ctx context.Context, p db.SeriesAppendColumnsParams) error {
	_, err := retryTransient(ctx, func() (struct{}, error) { return struct{}{}, j.call(ctx, p) })
	return err
}

func columnsParams(access string, c *seriesColumns) db.SeriesAppendColumnsParams {
	return db.SeriesAppendColumnsParams{AccessID: access, EventIds: c.events, Fields: c.fields, FieldCounts: c.counts,
		Scales: c.scales, Points: c.points, Time: c.time, Batch: c.batch,
		V1: c.v[0], V2: c.v[1], V3: c.v[2], V4: c.v[3], V5: c.v[4], V6: c.v[5], V7: c.v[6], V8: c.v[7]}
}

// joinColumns puts bodies one after the other, as the bodies of one seriesBatch, and a value column
// some body lacks holds null for that body's points.
func joinColumns(cs []*seriesColumns) *seriesColumns {
	m := &seriesColumns{batch: true}
	var used [8]bool
	for _, c := range cs {
		for k := range c.v {
			used[k] = used[k] || c.v[k] != nil
		}
	}
	for _, c := range cs {
		m.events = append(m.events, c.events...)
		m.fields = append(m.fields, c.fields...)
		m.counts = append(m.counts, c.counts...)
		m.scales = append(m.scales, c.scales...)
		if c.points != nil {
			m.points = append(m.points, c.points...)
		} else {
			m.points = append(m.points, int32(len(c.time)))
		}
		m.time = append(m.time, c.time...)
		for k := range c.v {
			switch {
			case c.v[k] != nil:
				m.v[k] = append(m.v[k], c.v[k]...)
			case used[k]:
				for range c.time {
					m.v[k] = append(m.v[k], nullCell)
				}
			}
		}
	}
	return m
}
