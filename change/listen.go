package change

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/db"
)

// The hub's three loops: the listener holds the LISTEN connection, the sequencer numbers
// committed changes (api.change_sequence, sequencer.go), the reader reads the numbered ones and
// fans them out. Each waits for a signal; a signal sent while its loop is busy is served by one
// more run.

// Channels PostgreSQL notifies on (sql/change/).
const (
	notifyPending = "silo_change_pending"
	notifyChanges = "silo_changes"
)

// listenerName is the application_name of the LISTEN connection (pg_stat_activity shows it).
const listenerName = "silo change listener"

// listenLoop keeps one LISTEN connection open, reconnecting with a growing pause; after every
// (re)connection it sequences and reads, so nothing announced while it was away is left behind.
func (h *Hub) listenLoop() {
	defer h.loops.Done()
	pause := 100 * time.Millisecond
	for h.ctx.Err() == nil {
		start := time.Now()
		err := h.listen(h.ctx)
		if h.ctx.Err() != nil {
			return
		}
		h.log.Warn("change listener disconnected", "err", err)
		if time.Since(start) > time.Minute {
			pause = 100 * time.Millisecond
		}
		select {
		case <-h.ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 10*time.Second)
	}
}

func (h *Hub) listen(ctx context.Context) error {
	cc := h.cfg.Pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = listenerName
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("error connecting: %w", err)
	}
	defer conn.Close(context.Background())
	for _, ch := range []string{notifyPending, notifyChanges} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return fmt.Errorf("error listening on %s: %w", ch, err)
		}
	}
	// With silo.change_notify off for the database, writers never notify: poll, and never claim the
	// awake sequencer (nobody would wake it).
	var notify string
	if err := conn.QueryRow(ctx, `SELECT coalesce(current_setting('silo.change_notify', true), '')`).Scan(&notify); err != nil {
		return fmt.Errorf("error reading silo.change_notify: %w", err)
	}
	h.notifyOff.Store(notify == "off")
	poll := h.cfg.PollInterval
	if poll <= 0 {
		poll = time.Second
		if notify == "off" {
			poll = 10 * time.Millisecond
		}
	}
	if !h.Ready() {
		// Listening first, then reading where the log ends: nothing falls in between.
		st, err := h.q.ChangeStatus(ctx)
		if err != nil {
			return fmt.Errorf("error reading the change log status: %w", err)
		}
		h.mu.Lock()
		h.lastID, h.ready = st.LastID, true
		h.mu.Unlock()
		h.mLastID.Set(float64(st.LastID))
		h.log.Info("change hub listening", "last_id", st.LastID)
	}
	signal(h.sequenceSignal)
	signal(h.fetchSignal)
	lastFetch := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, poll)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
				// Quiet for a while: sequence anyway (what it moves is announced), and read now and
				// then in case a notification was lost.
				signal(h.sequenceSignal)
				if time.Since(lastFetch) >= time.Second {
					signal(h.fetchSignal)
					lastFetch = time.Now()
				}
				continue
			}
			return err
		}
		switch n.Channel {
		case notifyPending:
			// A writer found no hub awake.
			h.heard.Add(1)
			signal(h.wakeSignal)
		case notifyChanges:
			if id, err := strconv.ParseInt(n.Payload, 10, 64); err == nil {
				h.announce(id)
			} else {
				signal(h.fetchSignal)
			}
		}
	}
}

// announce records that changes up to id exist and wakes the reader when that is news: a reader
// woken for an earlier announcement of id starts reading after it, so it reads through id. (The
// sequencer announces each of its runs twice: when the run returns and when silo_changes arrives.)
func (h *Hub) announce(id int64) {
	for {
		cur := h.notified.Load()
		if id <= cur {
			return
		}
		if h.notified.CompareAndSwap(cur, id) {
			break
		}
	}
	if id > h.LastID() {
		signal(h.fetchSignal)
	}
}

// fetchLoop reads the changes after the last one fanned out and fans them out, page by page.
func (h *Hub) fetchLoop() {
	defer h.loops.Done()
	const page = 1000
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.fetchSignal:
		}
		if !h.Ready() {
			continue // where the log ends is not known yet: reading from 0 would replay it all
		}
		for h.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
			rows, err := h.q.ChangesAfter(ctx, db.ChangesAfterParams{After: h.LastID(), MaxChanges: page})
			cancel()
			if err != nil {
				if h.ctx.Err() == nil {
					h.log.Warn("error reading changes", "err", err)
				}
				break
			}
			if len(rows) > 0 && rows[0].ID > h.LastID()+1 && !h.checkGap(rows[0].ID) {
				break
			}
			if len(rows) > 0 {
				h.fanout(rows)
			}
			if len(rows) < page {
				break
			}
		}
	}
}

// checkGap is called when the next change read is not the one after the last fanned out. Ids are
// skipped when a sequencer run fails, which is harmless; but when the log was trimmed past the
// hub's position (it could not read for longer than the retention), changes are gone that clients
// expected: every client is disconnected (4002) and, resuming, is told what it missed. It returns
// false when the gap could not be checked (read again later).
func (h *Hub) checkGap(next int64) bool {
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	r, err := h.q.ChangeResume(ctx, h.LastID())
	if err != nil {
		if h.ctx.Err() == nil {
			h.log.Warn("error checking a gap in the change log", "err", err)
		}
		return false
	}
	if r.Status != "expired" {
		return true
	}
	h.log.Warn("the change log was trimmed past this process's position: disconnecting every websocket client",
		"position", h.LastID(), "trimmed_through", r.TrimmedThrough, "next", next)
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		h.removeLocked(c)
		c.kick(closeBehind, "server behind")
	}
	return true
}
