package main

// The runner: the registry of workloads, the runs of a figure (a warm-up run, then Silo and its
// baselines taking turns in an order that rotates from run to run), the bounded loops a measure
// is made of, the statistics and the report.

import (
	"context"
	"fmt"
	"io"
	"log"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	runs        = 5 // measured runs per figure (one more warms up)
	runDeadline = 20 * time.Second
)

// ---------------------------------------------------------------------------------------------
// The registry

// A workload is one step of the bench. Each workload file registers its own in an init function.
type workload struct {
	order int      // position in the run: workloads run in increasing order
	only  []string // the SILO_BENCH_ONLY values that run it (every workload runs when none is set)
	run   func(ctx context.Context, bn *bench, rp *report) error
}

var workloads []workload

func register(w workload) { workloads = append(workloads, w) }

// selected returns the workloads to run, in order: those that name one of the comma-separated
// values of only among their SILO_BENCH_ONLY values, or all when only is empty or no workload
// names any.
func selected(only string) []workload {
	all := slices.Clone(workloads)
	slices.SortStableFunc(all, func(a, b workload) int { return a.order - b.order })
	var some []workload
	for _, w := range all {
		if slices.ContainsFunc(strings.Split(only, ","), func(o string) bool { return o != "" && slices.Contains(w.only, o) }) {
			some = append(some, w)
		}
	}
	if len(some) == 0 {
		return all
	}
	return some
}

// ---------------------------------------------------------------------------------------------
// Runs of a figure

// takeTurns measures one figure: warmUps runs, then n measured runs. Each run calls prepare(run)
// (when not nil), then every measure once, in an order that rotates from run to run so that each
// sees the machine in every position. It returns the results of the measured runs, one slice per
// measure in the order given.
func takeTurns(n, warmUps int, prepare func(run int) error, measures ...func() (float64, error)) ([][]float64, error) {
	res := make([][]float64, len(measures))
	for run := range warmUps + n {
		if prepare != nil {
			if err := prepare(run); err != nil {
				return nil, err
			}
		}
		for k := range measures {
			i := (run + k) % len(measures)
			x, err := measures[i]()
			if err != nil {
				return nil, err
			}
			if run >= warmUps {
				res[i] = append(res[i], x)
			}
		}
	}
	return res, nil
}

// ---------------------------------------------------------------------------------------------
// Bounded loops

// batchRate applies the batches in order until all are applied or runDeadline has passed, and
// returns the updates applied per second.
func batchRate(batches []batch, apply func(batch) error) (float64, error) {
	start, n := time.Now(), 0
	for _, b := range batches {
		if time.Since(start) > runDeadline {
			break
		}
		if err := apply(b); err != nil {
			return 0, err
		}
		n += len(b.rows)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// parallelBatchRate runs one client per element of work, each applying its batches in order until
// all are applied or runDeadline has passed, and returns the updates applied per second by all.
func parallelBatchRate(work [][]batch, apply func(batch) error) (float64, error) {
	var wg sync.WaitGroup
	var done atomic.Int64
	errc := make(chan error, len(work))
	start := time.Now()
	for c := range work {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range work[c] {
				if time.Since(start) > runDeadline {
					return
				}
				if err := apply(b); err != nil {
					errc <- err
					return
				}
				done.Add(int64(len(b.rows)))
			}
		}()
	}
	wg.Wait()
	close(errc)
	return float64(done.Load()) / time.Since(start).Seconds(), <-errc
}

// closedLoop calls fn from n goroutines until d has passed and returns the calls per second.
func closedLoop(n int, d time.Duration, fn func(client int) error) (float64, error) {
	var count atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, n)
	start := time.Now()
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < d {
				if err := fn(c); err != nil {
					errc <- err
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return float64(count.Load()) / time.Since(start).Seconds(), <-errc
}

// closedLoopTimed is closedLoop that also times every call: it returns the calls per second and
// the median and 99th percentile of the calls' durations, in milliseconds.
func closedLoopTimed(n int, d time.Duration, fn func(client int) error) (rate, p50, p99 float64, err error) {
	took := make([][]float64, n) // per client: no lock on the hot path
	rate, err = closedLoop(n, d, func(c int) error {
		start := time.Now()
		err := fn(c)
		took[c] = append(took[c], float64(time.Since(start).Microseconds())/1000)
		return err
	})
	all := slices.Concat(took...)
	return rate, percentile(all, 0.5), percentile(all, 0.99), err
}

// cpuCost collects, run by run, the CPU time a closed-loop measure spent per call: in this
// process (clients, in-process server, pools) and in the PostgreSQL backends of the bench
// database (bench.cpuTimes), in microseconds. On a shared machine it moves less than the rates.
type cpuCost struct{ self, backends []float64 }

// around wraps a measure that returns calls per second so that each of its runs is recorded.
func (c *cpuCost) around(ctx context.Context, bn *bench, measure func() (float64, error)) func() (float64, error) {
	return func() (float64, error) {
		s0, b0, err0 := bn.cpuTimes(ctx)
		start := time.Now()
		rate, err := measure()
		calls := rate * time.Since(start).Seconds()
		s1, b1, err1 := bn.cpuTimes(ctx)
		if err == nil && err0 == nil && err1 == nil && calls > 0 {
			c.self = append(c.self, float64((s1-s0).Microseconds())/calls)
			c.backends = append(c.backends, float64((b1-b0).Microseconds())/calls)
		}
		return rate, err
	}
}

// String gives the medians of the runs after the first (the warm-up).
func (c *cpuCost) String() string {
	if len(c.self) < 2 {
		return "not measured"
	}
	s, b := median(c.self[1:]), median(c.backends[1:])
	f := "%.0f"
	if s+b < 10 {
		f = "%.1f" // a series point costs a few µs: whole µs would hide what changes
	}
	return fmt.Sprintf(f+" µs ("+f+" in the bench process, "+f+" in PostgreSQL's backends)", s+b, s, b)
}

// ---------------------------------------------------------------------------------------------
// Statistics

func median(xs []float64) float64 { return percentile(xs, 0.5) }

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p+0.5)]
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(max(len(xs), 1))
}

func list(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}

// ---------------------------------------------------------------------------------------------
// The report

type line struct {
	name, silo, base, ratio, target, verdict string
}

type report struct {
	lines []line
	notes []string
}

// throughput adds a throughput line (higher is better); target 0 means none.
func (rp *report) throughput(name, unit, baseUnit string, silo, base []float64, target float64, errs int64) {
	s, b := median(silo), median(base)
	l := line{name: name, silo: thousands(s) + " " + unit, base: thousands(b) + " " + baseUnit,
		ratio: fmt.Sprintf("%.2f×", s/b), target: "—", verdict: "—"}
	if target > 0 {
		l.target = "≥ " + thousands(target) + " " + unit
		l.verdict = verdict(s >= target && errs == 0)
	}
	rp.lines = append(rp.lines, l)
	rp.notes = append(rp.notes, fmt.Sprintf("%s: silo runs [%s], raw runs [%s]", name, list(silo, "%.0f"), list(base, "%.0f")))
	if errs > 0 {
		rp.notes = append(rp.notes, fmt.Sprintf("%s: %d failed updates or requests", name, errs))
	}
	log.Printf("%s: silo %.0f %s, raw %.0f %s (%.2f×)", name, s, unit, b, baseUnit, s/b)
}

// latency adds a latency line (lower is better); the ratio is Silo's latency over the baseline's.
func (rp *report) latency(name string, silo, base float64, target float64, errs int64) {
	l := line{name: name, silo: fmt.Sprintf("%.2f ms", silo), base: fmt.Sprintf("%.2f ms", base),
		ratio: fmt.Sprintf("%.2f×", silo/base), target: "—", verdict: "—"}
	if target > 0 {
		l.target = fmt.Sprintf("< %.0f ms", target)
		l.verdict = verdict(silo < target && errs == 0)
	}
	rp.lines = append(rp.lines, l)
	if errs > 0 {
		rp.notes = append(rp.notes, fmt.Sprintf("%s: %d failed requests", name, errs))
	}
	log.Printf("%s: silo %.2f ms, raw %.2f ms (%.2f×)", name, silo, base, silo/base)
}

// thousands formats a rounded number with thousands separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "MISS"
}

func (rp *report) print(w io.Writer) {
	head := line{"workload", "Silo", "raw PostgreSQL", "ratio", "target", "result"}
	rows := append([]line{head}, rp.lines...)
	width := make([]int, 6)
	cells := func(l line) []string { return []string{l.name, l.silo, l.base, l.ratio, l.target, l.verdict} }
	for _, l := range rows {
		for i, c := range cells(l) {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	pad := func(s string, n int) string { return s + strings.Repeat(" ", n-len([]rune(s))) }
	for i, l := range rows {
		var b strings.Builder
		b.WriteString("|")
		for j, c := range cells(l) {
			b.WriteString(" " + pad(c, width[j]) + " |")
		}
		fmt.Fprintln(w, b.String())
		if i == 0 {
			b.Reset()
			b.WriteString("|")
			for j := range width {
				b.WriteString(strings.Repeat("-", width[j]+2) + "|")
			}
			fmt.Fprintln(w, b.String())
		}
	}
	fmt.Fprintln(w)
	for _, n := range rp.notes {
		fmt.Fprintln(w, "  "+n)
	}
}
