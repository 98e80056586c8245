package main

// Workload 6, change notifications: what recording changes costs the write path, the latency from
// commit to websocket receipt with 1,000 subscribed clients on one process, and the memory of
// 10,000 idle websocket clients. The only workload that runs a hub.
//
//   - Recording cost: api.profile_apply_batch in three modes taking turns: no profile change
//     recorded (silo.change_capture = off: the baseline), changes recorded with writers never
//     notifying (silo.change_notify = off), and as by default (writers notify only while no hub
//     is awake). 500 updates per call (mix) on one connection, and 1 update per call on 8
//     connections (each call a transaction: that is where pg_notify's commit-time lock would
//     show). A hub sequences meanwhile, configured as a process would be for the mode (polling
//     every 10 ms when writers never notify, the defaults otherwise), so sequencing costs what it
//     costs in production.
//   - Latency: 1,000 websocket clients on the hub of this process, each subscribed to
//     profile:latency:* and to two profiles of its own. 100 writes, one every 50 ms, each reaching
//     all 1,000 clients; then about 200 writes to one client's profile each; then (writers
//     notifying by default only) about 100 more while 8 connections apply 1 update per call to
//     other profiles, which keeps the hub awake, so that the writers do not notify. Latency is
//     from the return of the committing call to the receipt of the message by the client (both in
//     this process). Baseline: a bare pg_notify committed on one connection and received on a
//     LISTEN connection. Measured as configured by default (writers notify while no hub is awake),
//     then with writers never notifying and a hub polling every 10 ms.
//   - Idle clients: 10,000 websocket clients (in a child process, so that their memory is not
//     counted) each subscribed to a profile; the server's Go memory (heap + stacks, after a GC)
//     and resident set before and after, per client. A write to ten of them checks the hub still
//     delivers.
//
// SILO_BENCH_ONLY=notify runs this workload alone.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/server"
)

const (
	envWSChild      = "SILO_BENCH_WS_CHILD" // "<url> <n>": run as the idle clients' process
	latClients      = 1000
	latBroadcasts   = 100
	latSingles      = 200
	latInterval     = 50 * time.Millisecond
	idleClients     = 10000
	dialConcurrency = 64
	recordingConns  = 8
	recordingLength = 3 * time.Second
)

// The bench binary doubles as the process holding the idle clients.
func init() {
	if spec := os.Getenv(envWSChild); spec != "" {
		os.Exit(wsChild(spec))
	}
	register(workload{order: 70, only: []string{"notify"}, run: notifyWorkload})
}

// raiseNoFile lifts the soft limit of open files to the hard limit: every websocket is a file.
func raiseNoFile() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	lim.Cur = lim.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	return lim.Cur
}

func notifyWorkload(ctx context.Context, bn *bench, rp *report) error {
	log.Printf("change notifications ...")
	if lim := raiseNoFile(); lim < idleClients+1000 {
		return fmt.Errorf("open files limited to %d: the idle-clients figure needs %d", lim, idleClients+1000)
	}
	// The earlier workloads wrote changes with nobody sequencing them: a hub catches up first.
	_, _, stop, err := bn.startHub(ctx, 10*time.Millisecond)
	if err != nil {
		return err
	}
	if err := bn.waitSequenced(ctx, 5*time.Minute); err != nil {
		stop()
		return err
	}
	stop()
	if err := bn.recordingCost(ctx, rp); err != nil {
		return err
	}

	// Latency as configured by default: writers notify while no hub is awake.
	hub, wsURL, stop, err := bn.startHub(ctx, 0)
	if err != nil {
		return err
	}
	defer stop()
	if err := bn.notifyLatency(ctx, rp, wsURL, false); err != nil {
		return err
	}
	if err := bn.idleWebsockets(ctx, rp, hub, wsURL); err != nil {
		return err
	}
	stop()

	// Latency when writers do not notify and the hub polls every 10 ms.
	_, wsURL, stop, err = bn.startHub(ctx, 10*time.Millisecond)
	if err != nil {
		return err
	}
	defer stop()
	return bn.notifyLatency(ctx, rp, wsURL, true)
}

// startHub starts a hub (poll: its PollInterval, 0 the default) and an HTTP server for it; stop
// stops both (it may be called more than once).
func (bn *bench) startHub(ctx context.Context, poll time.Duration) (*change.Hub, string, func(), error) {
	hub := change.NewHub(change.Config{Pool: bn.silo, PollInterval: poll,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err := hub.Start(ctx); err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	srv := &http.Server{Handler: server.New(server.Config{Pool: bn.silo, Hub: hub, Version: "bench"}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = srv.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = hub.Stop(sctx)
		})
	}
	for deadline := time.Now().Add(time.Minute); !hub.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stop()
			return nil, "", nil, fmt.Errorf("the change hub did not get ready")
		}
	}
	// The clients authenticate with the bench's token in ?auth= (also in a child process, which
	// gets only the URL): anonymous access is off.
	return hub, "ws://" + ln.Addr().String() + "/ws?auth=" + url.QueryEscape(bn.token), stop, nil
}

// waitSequenced waits until no change is pending.
func (bn *bench) waitSequenced(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var n int64
		if err := bn.raw.QueryRow(ctx, `SELECT count(*) FROM silo.change_pending`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d changes still pending after %s", n, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeMode is a way of running the write path for the recording-cost figures.
type writeMode struct {
	name    string
	capture bool // silo.change_capture on: profile changes are recorded
	notify  bool // silo.change_notify on: writers notify silo_change_pending while no hub is awake
}

var writeModes = []writeMode{
	{"changes not recorded", false, false},
	{"changes recorded, writers never notify", true, false},
	{"changes recorded", true, true},
}

// recordingCost: the write path recording changes against the same recording none.
func (bn *bench) recordingCost(ctx context.Context, rp *report) error {
	// Dedicated connections, so that each keeps its silo.change_capture and silo.change_notify.
	conns := make([]*pgxpool.Conn, recordingConns)
	for i := range conns {
		c, err := bn.raw.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		conns[i] = c
	}
	onOff := func(on bool) string {
		if on {
			return "on"
		}
		return "off"
	}
	// The hub of the mode: a process reads silo.change_notify when it connects and polls every
	// 10 ms when it is off.
	stopHub := func() {}
	defer func() { stopHub() }()
	setMode := func(m writeMode) error {
		stopHub()
		poll := time.Duration(0)
		if !m.notify {
			poll = 10 * time.Millisecond
		}
		_, _, stop, err := bn.startHub(ctx, poll)
		if err != nil {
			return err
		}
		stopHub = stop
		for _, c := range conns {
			if _, err := c.Exec(ctx, `SELECT set_config('silo.change_capture', $1, false), set_config('silo.change_notify', $2, false)`,
				onOff(m.capture), onOff(m.notify)); err != nil {
				return err
			}
		}
		return nil
	}
	defer func() {
		for _, c := range conns {
			_, _ = c.Exec(context.Background(), `RESET silo.change_capture`)
			_, _ = c.Exec(context.Background(), `RESET silo.change_notify`)
		}
	}()
	apply := func(c *pgxpool.Conn, body []byte) (int64, error) {
		var bad int64
		err := c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'dead_letter') FROM api.profile_apply_batch($1::jsonb)`, body).Scan(&bad)
		return bad, err
	}
	// measureModes measures one figure in every write mode, the modes taking turns.
	measureModes := func(name string, prepare func(run int) error, measure func() (float64, error)) ([][]float64, error) {
		log.Printf("%s ...", name)
		measures := make([]func() (float64, error), len(writeModes))
		for k, m := range writeModes {
			measures[k] = func() (float64, error) {
				if err := setMode(m); err != nil {
					return 0, err
				}
				x, err := measure()
				if err != nil {
					return 0, fmt.Errorf("%s, %s: %w", name, m.name, err)
				}
				return x, nil
			}
		}
		return takeTurns(runs, 1, prepare, measures...)
	}
	var errs int64
	g := &gen{r: rand.New(rand.NewPCG(6, 6)), ns: "mix", mix: true}
	var batches []batch
	batchRes, err := measureModes("profile_apply_batch, 500/call, mix, change recording",
		func(int) error { // the same batches for every mode of a run
			batches = g.batches(batchesPerRun)
			return nil
		},
		func() (float64, error) {
			return batchRate(batches, func(b batch) error {
				bad, err := apply(conns[0], b.body)
				errs += bad
				return err
			})
		})
	if err != nil {
		return err
	}
	gens := make([]*gen, recordingConns)
	for c := range gens {
		gens[c] = &gen{r: rand.New(rand.NewPCG(7, uint64(c))), ns: "mix", mix: true}
	}
	singleRes, err := measureModes(fmt.Sprintf("profile_apply_batch, 1/call, %d connections, change recording", recordingConns), nil, func() (float64, error) {
		return closedLoop(recordingConns, recordingLength, func(c int) error {
			g := gens[c]
			u, _ := g.make(g.r.IntN(numCIDs/recordingConns)*recordingConns+c, g.r.IntN(numPaths))
			body, _ := json.Marshal([]update{u})
			_, err := apply(conns[c], body)
			return err
		})
	})
	if err != nil {
		return err
	}
	// The default has a relative target: recording changes costs at most a fifth of the updates.
	relative := func(silo, base []float64, errs int64, target bool) {
		if !target {
			return
		}
		last := &rp.lines[len(rp.lines)-1]
		last.target = "≥ 0.80× not recorded"
		last.verdict = verdict(median(silo) >= 0.8*median(base) && errs == 0)
	}
	for k := 1; k < len(writeModes); k++ {
		def := writeModes[k].notify
		rp.throughput("apply_batch, 500/call, mix: "+writeModes[k].name+" (vs not recorded)", "upd/s", "upd/s", batchRes[k], batchRes[0], 0, errs)
		relative(batchRes[k], batchRes[0], errs, def)
		rp.throughput(fmt.Sprintf("apply_batch, 1/call, %d conns: %s (vs not recorded)", recordingConns, writeModes[k].name), "upd/s", "upd/s", singleRes[k], singleRes[0], 0, 0)
		relative(singleRes[k], singleRes[0], 0, def)
	}
	rp.notes = append(rp.notes, "change recording: \"raw PostgreSQL\" is Silo recording no profile change (silo.change_capture = off); a hub sequences meanwhile; \"writers never notify\" is silo.change_notify = off (the hub polls every 10 ms), the other line the default")
	return bn.waitSequenced(ctx, time.Minute)
}

// latSample is the receipt of one message by one client (parsed after the measurement).
type latSample struct {
	data []byte
	at   time.Time
}

// notifyLatency: commit to websocket receipt, 1,000 clients, next to a bare LISTEN/NOTIFY.
func (bn *bench) notifyLatency(ctx context.Context, rp *report, wsURL string, quiet bool) error {
	name := fmt.Sprintf("notification latency, commit → websocket, %d clients", latClients)
	if quiet {
		name = fmt.Sprintf("latency, writers never notify, 10 ms poll, %d clients", latClients)
	}
	log.Printf("%s ...", name)
	writer, err := bn.raw.Acquire(ctx)
	if err != nil {
		return err
	}
	defer writer.Release()
	notify := "on"
	if quiet {
		notify = "off"
	}
	if _, err := writer.Exec(ctx, `SELECT set_config('silo.change_notify', $1, false)`, notify); err != nil {
		return err
	}
	defer writer.Exec(context.Background(), `RESET silo.change_notify`)

	// Baseline: pg_notify committed on one connection, received on a LISTEN connection.
	listener, err := bn.raw.Acquire(ctx)
	if err != nil {
		return err
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, `LISTEN bench_raw_notify`); err != nil {
		return err
	}
	var raw []float64
	for range latSingles {
		if _, err := bn.raw.Exec(ctx, `SELECT pg_notify('bench_raw_notify', 'x')`); err != nil {
			return err
		}
		committed := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := listener.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			return fmt.Errorf("raw LISTEN/NOTIFY: %w", err)
		}
		raw = append(raw, max(0, float64(time.Since(committed).Microseconds())/1000))
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := listener.Exec(ctx, `UNLISTEN *`); err != nil {
		return err
	}

	// The clients: every one on the broadcast channel and on a profile of its own.
	conns := make([]*websocket.Conn, latClients)
	samples := make([][]latSample, latClients)
	var received atomic.Int64
	var wg sync.WaitGroup
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		wg.Wait()
	}()
	if err := dialAll(latClients, func(i int) error {
		c, err := dialSubscribed(fmt.Sprintf("%s&channel=profile:latency:*&channel=profile:one:c%d&channel=profile:busy:c%d", wsURL, i, i))
		conns[i] = c
		return err
	}); err != nil {
		return err
	}
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					return
				}
				samples[i] = append(samples[i], latSample{data: data, at: time.Now()})
				received.Add(1)
			}
		}()
	}
	log.Printf("  %d clients connected and subscribed", latClients)

	commits := map[string]time.Time{}
	write := func(typ, cid string) error {
		body := fmt.Sprintf(`{"_id":%q,"_profile_type":%q,"_path":["v"],"_value":{"_v":"x","_reader":"_all"}}`, cid, typ)
		if _, err := writer.Exec(ctx, `SELECT count(*) FROM api.profile_apply_batch($1::jsonb)`, body); err != nil {
			return err
		}
		commits[typ+":"+cid] = time.Now()
		return nil
	}
	for k := range latBroadcasts {
		if err := write("latency", fmt.Sprintf("b%d", k)); err != nil {
			return err
		}
		time.Sleep(latInterval)
	}
	r := rand.New(rand.NewPCG(8, 8))
	singleTargets := map[string]bool{}
	for range latSingles {
		c := r.IntN(latClients)
		cid := fmt.Sprintf("c%d", c)
		if singleTargets[cid] {
			continue
		}
		singleTargets[cid] = true
		if err := write("one", cid); err != nil {
			return err
		}
		time.Sleep(latInterval / 2)
	}
	// Under load (writers notify by default only): 8 connections apply 1 update per call in a
	// closed loop to profiles nobody subscribes to, which keeps the hub awake, while writes reach
	// one client each as above.
	busyTargets := map[string]bool{}
	if !quiet {
		stopLoad := make(chan struct{})
		var loadWG sync.WaitGroup
		loadErr := make(chan error, recordingConns)
		for c := range recordingConns {
			conn, err := bn.raw.Acquire(ctx)
			if err != nil {
				close(stopLoad)
				loadWG.Wait()
				return err
			}
			loadWG.Add(1)
			go func() {
				defer loadWG.Done()
				defer conn.Release()
				for i := 0; ; i++ {
					select {
					case <-stopLoad:
						return
					default:
					}
					body := fmt.Sprintf(`{"_id":"w%d-%d","_profile_type":"load","_path":["v"],"_value":{"_v":"%d","_reader":"_all"}}`, c, i%100, i)
					if _, err := conn.Exec(ctx, `SELECT count(*) FROM api.profile_apply_batch($1::jsonb)`, body); err != nil {
						loadErr <- err
						return
					}
				}
			}()
		}
		time.Sleep(200 * time.Millisecond)
		for range latSingles / 2 {
			cid := fmt.Sprintf("c%d", r.IntN(latClients))
			if busyTargets[cid] {
				continue
			}
			busyTargets[cid] = true
			if err := write("busy", cid); err != nil {
				close(stopLoad)
				loadWG.Wait()
				return err
			}
			time.Sleep(latInterval / 2)
		}
		close(stopLoad)
		loadWG.Wait()
		close(loadErr)
		if err := <-loadErr; err != nil {
			return err
		}
	}
	want := int64(latBroadcasts*latClients + len(singleTargets) + len(busyTargets))
	for deadline := time.Now().Add(time.Minute); received.Load() < want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	conns = nil

	var all, single, busy []float64
	for _, ss := range samples {
		for _, s := range ss {
			var m struct {
				Type    string `json:"type"`
				Payload struct {
					ProfileType   string `json:"profile_type"`
					CorrelationID string `json:"correlation_id"`
				} `json:"payload"`
			}
			if json.Unmarshal(s.data, &m) != nil || m.Type != "change" {
				continue
			}
			committed, ok := commits[m.Payload.ProfileType+":"+m.Payload.CorrelationID]
			if !ok {
				continue
			}
			ms := max(0, float64(s.at.Sub(committed).Microseconds())/1000)
			switch m.Payload.ProfileType {
			case "one":
				single = append(single, ms)
			case "busy":
				busy = append(busy, ms)
			default:
				all = append(all, ms)
			}
		}
	}
	missing := want - int64(len(all)+len(single)+len(busy))
	// The latency targets are those of the default configuration. With writers not notifying, the
	// hub's poll period (10 ms) adds half a period on average: shown for comparison, no target.
	medianTarget, p99Target := 20.0, 100.0
	if quiet {
		medianTarget, p99Target = 0, 0
	}
	rp.latency(name+", to all, median", median(all), median(raw), medianTarget, missing)
	rp.latency(name+", to all, p99", percentile(all, 0.99), percentile(raw, 0.99), p99Target, missing)
	rp.latency(name+", to one, median", median(single), median(raw), medianTarget, 0)
	rp.latency(name+", to one, p99", percentile(single, 0.99), percentile(raw, 0.99), p99Target, 0)
	if !quiet {
		loaded := fmt.Sprintf("%s, to one, %d connections writing meanwhile", name, recordingConns)
		rp.latency(loaded+", median", median(busy), median(raw), 0, 0)
		rp.latency(loaded+", p99", percentile(busy, 0.99), percentile(raw, 0.99), 0, 0)
	}
	rp.notes = append(rp.notes, fmt.Sprintf("notification latency: %d writes reaching all %d clients (%d receipts, %d missing), %d writes reaching one and %d reaching one while %d connections write (the hub awake); raw: %d bare pg_notify on a LISTEN connection",
		latBroadcasts, latClients, len(all), missing, len(single), len(busy), recordingConns, len(raw)))
	return nil
}

// dialAll runs dial(i) for i < n, dialConcurrency at a time.
func dialAll(n int, dial func(i int) error) error {
	sem := make(chan struct{}, dialConcurrency)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := dial(i); err != nil {
				errc <- err
			}
		}()
	}
	wg.Wait()
	close(errc)
	return <-errc
}

var wsDialer = &websocket.Dialer{HandshakeTimeout: time.Minute, ReadBufferSize: 1024, WriteBufferSize: 1024}

// dialSubscribed opens a websocket and reads its ready and subscribed messages.
func dialSubscribed(u string) (*websocket.Conn, error) {
	var c *websocket.Conn
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var resp *http.Response
		c, resp, err = wsDialer.Dial(u, nil)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err == nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", u, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	for _, want := range []string{"ready", "subscribed"} {
		_, data, err := c.ReadMessage()
		if err != nil {
			c.Close()
			return nil, err
		}
		if !strings.Contains(string(data), `"type":"`+want+`"`) {
			c.Close()
			return nil, fmt.Errorf("expected %s, got %s", want, data)
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, nil
}

// goMemory is the Go memory in use: heap and goroutine stacks, after a collection.
func goMemory() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// rss is the resident set of this process.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// idleWebsockets: 10,000 idle clients in a child process; the server's memory per client.
func (bn *bench) idleWebsockets(ctx context.Context, rp *report, hub *change.Hub, wsURL string) error {
	name := fmt.Sprintf("idle websocket clients on one process (%s)", thousands(idleClients))
	log.Printf("%s ...", name)
	for deadline := time.Now().Add(30 * time.Second); hub.Clients() > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	memBefore, rssBefore := goMemory(), rss()

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	child := exec.Command(exe)
	child.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", envWSChild, wsURL, idleClients))
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	began := time.Now()
	if err := child.Start(); err != nil {
		return err
	}
	defer func() {
		stdin.Close()
		_ = child.Wait()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	wait := func(prefix string, limit time.Duration) (string, error) {
		timeout := time.After(limit)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					return "", fmt.Errorf("the clients' process ended before %q", prefix)
				}
				if strings.HasPrefix(l, "error") {
					return "", fmt.Errorf("clients' process: %s", l)
				}
				if strings.HasPrefix(l, prefix) {
					return l, nil
				}
			case <-timeout:
				return "", fmt.Errorf("no %q from the clients' process within %s", prefix, limit)
			}
		}
	}
	if _, err := wait("connected", 5*time.Minute); err != nil {
		return err
	}
	connectTime := time.Since(began)
	clients := hub.Clients()
	time.Sleep(time.Second)
	memAfter, rssAfter := goMemory(), rss()

	// Still alive: ten of them get a change.
	for i := range 10 {
		body := fmt.Sprintf(`{"_id":"c%d","_profile_type":"idle","_path":["v"],"_value":{"_v":"x","_reader":"_all"}}`, i*(idleClients/10))
		if _, err := bn.q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(body)}); err != nil {
			return err
		}
	}
	_, err = wait("received 10", time.Minute)
	delivered := err == nil

	perHeap := float64(int64(memAfter)-int64(memBefore)) / float64(max(clients, 1))
	perRSS := float64(int64(rssAfter)-int64(rssBefore)) / float64(max(clients, 1))
	rp.lines = append(rp.lines, line{name: name,
		silo: fmt.Sprintf("%s clients, %.1f KB/client Go heap+stacks, %.1f KB/client RSS", thousands(float64(clients)), perHeap/1024, perRSS/1024),
		base: "—", ratio: "—", target: "≥ 10,000 clients",
		verdict: verdict(clients >= idleClients && delivered)})
	rp.notes = append(rp.notes, fmt.Sprintf("idle websockets: %d connected and subscribed in %s; Go heap+stacks %.1f → %.1f MB, RSS %.1f → %.1f MB; a change to 10 of them delivered: %v",
		clients, connectTime.Round(time.Millisecond), float64(memBefore)/1e6, float64(memAfter)/1e6, float64(rssBefore)/1e6, float64(rssAfter)/1e6, delivered))
	log.Printf("  %d idle clients: %.1f KB/client heap+stacks, %.1f KB/client RSS", clients, perHeap/1024, perRSS/1024)
	return nil
}

// wsChild holds n idle websocket clients on url, each subscribed to profile:idle:c<i>, prints
// "connected n" when all are subscribed and "received k" for each change received, and ends when
// its standard input closes.
func wsChild(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 2 {
		fmt.Println("error: bad spec", spec)
		return 2
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	raiseNoFile()
	conns := make([]*websocket.Conn, n)
	if err := dialAll(n, func(i int) error {
		c, err := dialSubscribed(fmt.Sprintf("%s&channel=profile:idle:c%d", f[0], i))
		conns[i] = c
		return err
	}); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("connected", n)
	var received atomic.Int64
	var mu sync.Mutex
	for _, c := range conns {
		go func() {
			for {
				_, data, err := c.ReadMessage()
				if err != nil {
					return
				}
				if strings.Contains(string(data), `"type":"change"`) {
					k := received.Add(1)
					mu.Lock()
					fmt.Println("received", k)
					mu.Unlock()
				}
			}
		}()
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	return 0
}
