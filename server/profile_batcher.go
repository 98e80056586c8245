package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/silo-db/silo/db"
)

// The update batcher is group commit for small requests. With synchronous commit every
// transaction waits for its WAL flush, so one transaction per single-update request caps a busy
// server at the disk's flush rate. Small requests that arrive while others are being applied are
// joined into one api.profile_apply_batch call — one transaction, one flush — and each request gets
// back exactly its own result rows. This changes nothing in the semantics: every update of a batch
// is applied or dead-lettered on its own, each request's updates stay in their order, and
// concurrent requests had no order between them to begin with. Only requests of tokens with the
// same readers are joined: the results are told as those readers may see them.

const (
	coalesceMaxUpdates = 100      // a request with more updates is applied on its own
	coalesceMaxBytes   = 64 << 10 // so is a larger body
	batchMaxUpdates    = 1000     // updates joined into one call at most
	batchAppliers      = 2        // calls in flight at once
)

type batchItem struct {
	elems   [][]byte // the request's updates
	readers []string // the token's readers
	key     string   // the readers joined: requests with equal keys are joined
	reply   chan batchReply
}

type batchReply struct {
	rows []db.ProfileApplyBatchRow
	err  error
}

type batcher struct {
	q     *db.Queries
	queue chan *batchItem
}

func newBatcher(q *db.Queries) *batcher {
	b := &batcher{q: q, queue: make(chan *batchItem, 4096)}
	for range batchAppliers {
		go b.run()
	}
	return b
}

// splitUpdates returns the elements of a body that is a JSON object (one update) or array, or nil
// when the request should not be joined with others.
func splitUpdates(body []byte) [][]byte {
	if len(body) > coalesceMaxBytes {
		return nil
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return [][]byte{trimmed}
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil || len(raw) == 0 || len(raw) > coalesceMaxUpdates {
		return nil
	}
	out := make([][]byte, len(raw))
	for i, r := range raw {
		out[i] = r
	}
	return out
}

// apply applies the request's updates, joined with whatever other small requests of tokens with
// the same readers are waiting.
func (b *batcher) apply(ctx context.Context, elems [][]byte, readers []string) ([]db.ProfileApplyBatchRow, error) {
	it := &batchItem{elems: elems, readers: readers, key: strings.Join(readers, "\x00"), reply: make(chan batchReply, 1)}
	select {
	case b.queue <- it:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-it.reply:
		return r.rows, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (b *batcher) run() {
	for first := range b.queue {
		items := []*batchItem{first}
		n := len(first.elems)
	collect:
		for n < batchMaxUpdates {
			select {
			case it := <-b.queue:
				items = append(items, it)
				n += len(it.elems)
			default:
				break collect
			}
		}
		// One call per set of readers, in the order they first came.
		var keys []string
		groups := map[string][]*batchItem{}
		for _, it := range items {
			if _, seen := groups[it.key]; !seen {
				keys = append(keys, it.key)
			}
			groups[it.key] = append(groups[it.key], it)
		}
		for _, k := range keys {
			b.applyGroup(groups[k])
		}
	}
}

// applyGroup applies the updates of requests with the same readers as one call and hands each
// request its own result rows.
func (b *batcher) applyGroup(items []*batchItem) {
	var buf bytes.Buffer
	n := 0
	buf.WriteByte('[')
	for _, it := range items {
		for _, e := range it.elems {
			if buf.Len() > 1 {
				buf.WriteByte(',')
			}
			buf.Write(e)
			n++
		}
	}
	buf.WriteByte(']')
	// Not the context of one request: the call serves them all.
	rows, err := applyBatch(context.Background(), b.q, buf.Bytes(), items[0].readers)
	if err == nil && len(rows) != n {
		err = fmt.Errorf("profile_apply_batch returned %d rows for %d updates", len(rows), n)
	}
	off := 0
	for _, it := range items {
		if err != nil {
			it.reply <- batchReply{err: err}
			continue
		}
		mine := rows[off : off+len(it.elems)]
		off += len(it.elems)
		it.reply <- batchReply{rows: mine}
	}
}
