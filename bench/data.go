package main

// The data set: update generators over the correlation ids and grains of a namespace, batches of
// updates with the rows the baseline writes for them, a batch written through Silo and through the
// raw upsert, and the prefill both start from.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/silo-db/silo/db"
)

const (
	batchSize     = 500  // updates per batch
	numCIDs       = 2000 // correlation ids per namespace
	numPaths      = 10   // grains per correlation id and namespace
	batchesPerRun = 30   // batches per run of the one-connection batch figures
)

// update is a profile update message (the UPDATE format).
type update struct {
	ID          string     `json:"_id"`
	ProfileType string     `json:"_profile_type"`
	Path        []string   `json:"_path"`
	Operation   string     `json:"_operation"`
	Value       grainValue `json:"_value"`
}

type grainValue struct {
	V any     `json:"_v"`
	C float64 `json:"_c"`
}

// rawRow is a row the baseline writes for an update: the _latest row, as a plain upsert would,
// and for a _set_with_history also the history row Silo archives (pit set).
type rawRow struct {
	cid, path, value, grainType string
	pit                         string // empty: _latest
}

// gen makes updates over numCIDs × numPaths grains of one namespace (the first path segment). In
// the mix namespace a grain's operation follows from its index, so grain types never clash:
// 0–6 _set (70%), 7 _set_with_history (10%), 8 _inc (10%), 9 _array_put/_array_append (10%).
// The set namespace takes _set only.
type gen struct {
	r   *rand.Rand
	ns  string
	mix bool
	seq int
	// last is the value the generator last gave each grain (JSON), the value a history row of the
	// baseline archives.
	last map[[2]int]string
	// ordered: the array grain (index 9) always takes an _array_append of the sequence number, so
	// the result shows the order its updates were applied in; sent counts them per correlation id.
	ordered bool
	sent    map[string]int
}

func cidName(cid int) string { return fmt.Sprintf("cust-%05d", cid) }

func (g *gen) make(cid, p int) (update, rawRow) {
	u, row := g.makeOne(cid, p)
	if g.last == nil {
		g.last = map[[2]int]string{}
	}
	g.last[[2]int{cid, p}] = row.value
	return u, row
}

// historyRow is the history row the baseline writes for a _set_with_history whose _latest row is
// row: the grain's previous value (when the generator knows it, else one of the same size) at a
// history pit of Silo's shape that no other row of the baseline has.
func historyRow(row rawRow, prev string, known bool) rawRow {
	h := row
	if known {
		h.value = prev
	}
	h.pit = "_" + time.UnixMilli(histSeq.Add(1)).UTC().Format("20060102T150405.000Z")
	return h
}

// histSeq numbers the baseline's history rows across generators, so that their pits never meet.
var histSeq atomic.Int64

func (g *gen) makeOne(cid, p int) (update, rawRow) {
	g.seq++
	u := update{ID: cidName(cid), ProfileType: "_d", Path: []string{g.ns, fmt.Sprintf("g%d", p)},
		Operation: "_set", Value: grainValue{C: 0.9}}
	v := fmt.Sprintf("value-%d-%d", g.seq, g.r.IntN(1_000_000))
	u.Value.V = v
	row := rawRow{cid: u.ID, path: "/" + g.ns + "/" + u.Path[1], grainType: "t"}
	row.value, _ = jsonString(v)
	if g.mix {
		switch p {
		case 7:
			u.Operation = "_set_with_history"
		case 8:
			u.Operation, u.Value.V = "_inc", "0|1|1"
			row.grainType = "c"
			row.value = fmt.Sprintf(`{"_initial": 0, "_step": 1, "_current": %d}`, g.seq)
		case 9:
			u.Operation = "_array_put"
			if g.r.IntN(2) == 0 {
				u.Operation = "_array_append"
			}
			tag := fmt.Sprintf("tag-%d", g.r.IntN(8))
			if g.ordered {
				u.Operation, tag = "_array_append", strconv.Itoa(g.seq)
				if g.sent == nil {
					g.sent = map[string]int{}
				}
				g.sent[u.ID]++
			}
			u.Value.V = []string{tag}
			row.grainType = "a"
			row.value = `["` + tag + `"]`
		}
	}
	return u, row
}

func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// batch is one batch of updates as a JSON body, with the rows the baseline writes for it: one
// _latest row per update (rows) and the history rows Silo writes besides (hist).
type batch struct {
	body []byte
	rows []rawRow
	hist []rawRow
}

// batch picks batchSize distinct grains (no grain twice: one upsert statement cannot touch a row
// twice) among the correlation ids with cid % mod == part.
func (g *gen) batch(mod, part int) batch {
	seen := make(map[[2]int]bool, batchSize)
	ups := make([]update, 0, batchSize)
	var b batch
	for len(ups) < batchSize {
		cid := g.r.IntN(numCIDs/mod)*mod + part
		p := g.r.IntN(numPaths)
		if seen[[2]int{cid, p}] {
			continue
		}
		seen[[2]int{cid, p}] = true
		prev, known := g.last[[2]int{cid, p}]
		u, row := g.make(cid, p)
		ups = append(ups, u)
		b.rows = append(b.rows, row)
		if u.Operation == "_set_with_history" {
			b.hist = append(b.hist, historyRow(row, prev, known))
		}
	}
	b.body, _ = json.Marshal(ups)
	return b
}

// batches makes n batches of g over all correlation ids.
func (g *gen) batches(n int) []batch {
	bs := make([]batch, n)
	for i := range bs {
		bs[i] = g.batch(1, 0)
	}
	return bs
}

const rawUpsertBatch = `
INSERT INTO bench_raw (correlation_id, profile_type, path, pit, value, certainty, grain_type, inserted)
SELECT c, '_d', p, t, v::jsonb, 0.9, g, $6
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(c, p, v, g, t)
ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
SET value = excluded.value, certainty = excluded.certainty, inserted = excluded.inserted,
    ttl = excluded.ttl, ttn = excluded.ttn, reader = excluded.reader, origin = excluded.origin,
    expires_at = excluded.expires_at, notify_at = excluded.notify_at`

// rawBatch writes the rows of a batch with one raw upsert: the same rows Silo writes (the _latest
// rows and the history rows), or with latestOnly just the _latest rows.
func (bn *bench) rawBatch(ctx context.Context, b batch, latestOnly bool) error {
	rows := b.rows
	if !latestOnly {
		rows = append(slices.Clip(b.rows), b.hist...)
	}
	n := len(rows)
	c, p, v, g, t := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		c[i], p[i], v[i], g[i], t[i] = r.cid, r.path, r.value, r.grainType, cmp.Or(r.pit, "_latest")
	}
	_, err := bn.raw.Exec(ctx, rawUpsertBatch, c, p, v, g, t, time.Now().UnixMilli())
	return err
}

// applyBatch calls api.profile_apply_batch and returns the number of updates not applied.
func (bn *bench) applyBatch(ctx context.Context, b batch) (int64, error) {
	rows, err := bn.q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: b.body})
	if err != nil {
		return 0, err
	}
	var bad int64
	for _, r := range rows {
		if r.Status == "dead_letter" {
			bad++
			if bad == 1 && r.Reason != nil {
				log.Printf("  dead letter: %s", *r.Reason)
			}
		}
	}
	if len(rows) != len(b.rows) {
		bad += int64(len(b.rows) - len(rows))
	}
	return bad, nil
}

// prefill writes every grain of both namespaces through Silo, then copies the store into the
// baseline's table, so Silo and the baseline start from the same rows.
func (bn *bench) prefill(ctx context.Context) error {
	for _, ns := range []string{"set", "mix"} {
		g := &gen{r: rand.New(rand.NewPCG(7, 7)), ns: ns, mix: ns == "mix"}
		var ups []update
		flush := func() error {
			body, _ := json.Marshal(ups)
			bad, err := bn.applyBatch(ctx, batch{body: body, rows: make([]rawRow, len(ups))})
			if err == nil && bad > 0 {
				err = fmt.Errorf("prefill: %d updates not applied", bad)
			}
			ups = ups[:0]
			return err
		}
		for cid := range numCIDs {
			for p := range numPaths {
				u, _ := g.make(cid, p)
				if g.mix && p == 9 {
					u.Operation = "_array_put"
				}
				ups = append(ups, u)
				if len(ups) == batchSize {
					if err := flush(); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, stmt := range []string{
		`INSERT INTO bench_raw SELECT * FROM profile.profilestore`,
		`VACUUM (ANALYZE) profile.profilestore`,
		`VACUUM (ANALYZE) bench_raw`,
		`CHECKPOINT`,
	} {
		if _, err := bn.raw.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}
