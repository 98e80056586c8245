package change

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/silo-db/silo/db"
)

// The sequencer: the loop that numbers committed changes (api.change_sequence) and announces them.
//
// Writers notify silo_change_pending only when no hub is awake, because PostgreSQL makes notifying
// commits wait for each other. So a hub that hears writers close together (two notifications
// within AwakeLinger) claims the lease of the awake sequencer (api.change_sequencer_wake): while it
// holds it, writers do not notify and the hub sequences every AwakePollInterval by itself. Writers
// further apart notify each time, which costs them nothing at such a rate and is the quickest way
// to their subscribers. After AwakeLinger without a change the hub gives the lease up
// (api.change_sequencer_sleep) and drains: it goes on sequencing until no writer that read the
// lease can still commit, then sleeps. The protocol, and why no change waits for it, is in
// sql/change/02_sequence.sql.

// sequencerState is where a hub's sequencer is in the protocol.
type sequencerState int

const (
	// asleep: runs when a writer notifies (and claims the lease when writers come close
	// together), when the listener's safety net fires and after a reconnection.
	asleep sequencerState = iota
	// awake: holds the lease; runs every AwakePollInterval and renews the lease every half lease.
	awake
	// draining: gave the lease up (writers notify again); runs and asks to sleep, backing off while
	// nothing moves, until no writer that read the lease can still commit.
	draining
)

const (
	// awakeLease is how long a claim of the awake sequencer stands without renewal: what a hub that
	// dies awake can cost (its writers' changes then wait for another hub's safety net).
	awakeLease = time.Second
	// drainMax is the longest pause between two runs while draining.
	drainMax = 100 * time.Millisecond
	// errorPauseMax is the longest pause between two runs of an awake or draining sequencer while
	// the database answers with errors.
	errorPauseMax = time.Second
)

// sequencer is the state of the sequencer loop; only that goroutine touches it.
type sequencer struct {
	h         *Hub
	state     sequencerState
	interval  time.Duration // pause before the next run, awake or draining
	lastMoved time.Time     // when a run last moved changes (awake)
	renewed   time.Time     // when the lease was last claimed or renewed
	lastHeard time.Time     // when a writer's notification was last heard
}

// sequenceLoop runs api.change_sequence when asked and, while awake or draining, on its own;
// requests that arrive while it runs are served by one more run.
func (h *Hub) sequenceLoop() {
	defer h.loops.Done()
	s := &sequencer{h: h}
	defer s.stop()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		var tick <-chan time.Time
		if s.state != asleep {
			timer.Reset(s.interval)
			tick = timer.C
		}
		select {
		case <-h.ctx.Done():
			return
		case <-h.wakeSignal:
		case <-h.sequenceSignal:
		case <-tick:
		}
		s.step(h.heard.Swap(0))
	}
}

// step is one turn of the loop; heard: the notifications of writers on silo_change_pending since
// the last turn (each writer that notified found no hub awake).
func (s *sequencer) step(heard int64) {
	h := s.h
	now := time.Now()
	// Writers close together: be awake, so that they stop notifying. A notification that reaches
	// an awake hub means its lease is gone (it ran out, or another hub's sleep ended it): renew.
	claim := heard > 0 && !h.notifyOff.Load() &&
		(heard > 1 || s.state != asleep || now.Sub(s.lastHeard) <= h.cfg.AwakeLinger)
	if heard > 0 {
		s.lastHeard = now
	}
	if s.state == draining && !claim {
		ok, err := s.sleep()
		if err == nil && ok {
			s.set(asleep)
			return
		}
	}
	moved, err := h.sequence()
	if err != nil {
		if s.state != asleep {
			s.interval = min(max(2*s.interval, h.cfg.AwakePollInterval), errorPauseMax)
		}
		return
	}
	if claim {
		// After the run, so that the change of the writer who notified goes out first.
		s.claim()
	}
	now = time.Now()
	switch s.state {
	case awake:
		s.interval = h.cfg.AwakePollInterval
		if moved {
			s.lastMoved = now
		}
		if now.Sub(s.renewed) >= awakeLease/2 {
			s.claim()
		}
		if s.state == awake && now.Sub(s.lastMoved) >= h.cfg.AwakeLinger {
			if ok, err := s.sleep(); err == nil && ok {
				s.set(asleep)
			} else {
				s.set(draining)
			}
		}
	case draining:
		if moved {
			s.interval = h.cfg.AwakePollInterval
		} else {
			s.interval = min(2*s.interval, drainMax)
		}
	}
}

// claim claims or renews the lease. Refused, another hub holds one: that hub sequences, and
// answers for every writer that read its lease, so this one sleeps.
func (s *sequencer) claim() {
	h := s.h
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	ok, err := h.q.ChangeSequencerWake(ctx, db.ChangeSequencerWakeParams{Hub: h.number, LeaseMs: int32(awakeLease / time.Millisecond)})
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("error claiming the awake sequencer", "err", err)
		}
		return
	}
	now := time.Now()
	switch {
	case ok && s.state != awake:
		s.set(awake)
		h.mWakeups.Inc()
		s.lastMoved = now
		s.renewed = now
	case ok:
		s.renewed = now
	case s.state == awake:
		s.set(asleep)
	}
}

// sleep gives the lease up; true: nothing is pending and no writer that read the lease still
// runs (or another hub holds the lease), so the hub may sleep.
func (s *sequencer) sleep() (bool, error) {
	h := s.h
	ctx, cancel := context.WithTimeout(h.ctx, 10*time.Second)
	defer cancel()
	ok, err := h.sleepCall(ctx)
	if err != nil && h.ctx.Err() == nil {
		h.log.Warn("error putting the sequencer to sleep", "err", err)
	}
	return ok, err
}

// sleepCall calls api.change_sequencer_sleep in a READ COMMITTED transaction of its own (it looks
// for pending rows in a snapshot taken after it took a lock), whatever the database's default
// isolation.
func (h *Hub) sleepCall(ctx context.Context) (bool, error) {
	var ok bool
	err := pgx.BeginTxFunc(ctx, h.cfg.Pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		var err error
		ok, err = h.q.WithTx(tx).ChangeSequencerSleep(ctx, h.number)
		return err
	})
	return ok, err
}

// set enters a state.
func (s *sequencer) set(st sequencerState) {
	s.state = st
	s.interval = s.h.cfg.AwakePollInterval
	s.h.awake.Store(st != asleep)
	if st == asleep {
		s.h.mAwake.Set(0)
	} else {
		s.h.mAwake.Set(1)
	}
}

// stop gives the lease up when the hub stops, so that writers notify the other processes' hubs at
// once instead of after the lease.
func (s *sequencer) stop() {
	if s.state == asleep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = s.h.sleepCall(ctx)
	s.set(asleep)
}

// sequence runs api.change_sequence, which notifies silo_changes at its commit when it moved
// changes; moved: this run numbered changes.
func (h *Hub) sequence() (moved bool, err error) {
	known := h.notified.Load()
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	last, err := h.q.ChangeSequence(ctx, true)
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("error sequencing changes", "err", err)
		}
		return false, err
	}
	h.announce(last)
	return last > known, nil
}
