package main

// Workload 1: api.profile_apply_batch, 500 updates per call on one connection, in two figures: the
// mix and 100% _set. Baseline: the same rows as one INSERT ... SELECT FROM unnest(...) ON CONFLICT
// DO UPDATE on one connection; the mix is also shown against the upsert of its _latest rows alone.
// Target: at least half the throughput of the raw upsert of the same rows.

import (
	"context"
	"fmt"
	"log"
	"math/rand/v2"
)

func init() {
	register(workload{order: 10, only: []string{"apply", "async"}, run: func(ctx context.Context, bn *bench, rp *report) error {
		return applyWorkload(ctx, bn, rp, true)
	}})
	register(workload{order: 20, only: []string{"apply"}, run: func(ctx context.Context, bn *bench, rp *report) error {
		return applyWorkload(ctx, bn, rp, false)
	}})
}

// applyWorkload measures batches of the mix (mix) or of 100% _set on one connection.
func applyWorkload(ctx context.Context, bn *bench, rp *report, mix bool) error {
	name, ns := "profile_apply_batch, 500/call, 100% _set", "set"
	if mix {
		name, ns = "profile_apply_batch, 500/call, mix", "mix"
	}
	log.Printf("%s ...", name)
	g := &gen{r: rand.New(rand.NewPCG(1, uint64(len(ns)))), ns: ns, mix: mix}
	var batches []batch
	var errs int64
	var rows, hist int
	prepare := func(run int) error {
		batches = g.batches(batchesPerRun)
		if run > 0 { // the measured runs
			for _, b := range batches {
				rows, hist = rows+len(b.rows), hist+len(b.hist)
			}
		}
		return nil
	}
	// Each measure applies the run's batches and returns updates/s: for the baselines, the updates
	// whose rows they wrote.
	measures := []func() (float64, error){
		func() (float64, error) {
			return batchRate(batches, func(b batch) error {
				bad, err := bn.applyBatch(ctx, b)
				errs += bad
				return err
			})
		},
		func() (float64, error) {
			return batchRate(batches, func(b batch) error { return bn.rawBatch(ctx, b, false) })
		},
	}
	if mix {
		measures = append(measures, func() (float64, error) {
			return batchRate(batches, func(b batch) error { return bn.rawBatch(ctx, b, true) })
		})
	}
	res, err := takeTurns(runs, 1, prepare, measures...)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	silo, raw := res[0], res[1]
	rp.throughput(name, "upd/s", "upd/s", silo, raw, 0, errs)
	// The target here is relative: at least half the throughput of a raw upsert of the same rows.
	last := &rp.lines[len(rp.lines)-1]
	last.target = "≥ 0.50× raw"
	last.verdict = verdict(median(silo) >= median(raw)/2 && errs == 0)
	if mix {
		rp.notes = append(rp.notes, fmt.Sprintf("%s: the baseline writes the rows Silo writes, %d _latest rows and %d history rows (%.1f%%) in %d runs",
			name, rows, hist, 100*float64(hist)/float64(rows), runs))
		rp.throughput(name+", raw writing the _latest rows only", "upd/s", "upd/s", silo, res[2], 0, errs)
	}
	return nil
}
