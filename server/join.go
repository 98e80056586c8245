package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Joining is group commit for write requests. With synchronous commit every transaction waits for
// its WAL flush, so one transaction per small request caps a busy server at the disk's flush rate,
// and every request pays a call's fixed cost. Small requests that arrive while others are being
// written are joined into one call of a write route's SQL function — one transaction, one flush —
// and each request gets back exactly its own answer. Every write route takes a JSON array of
// requests ({"<body>": ..., "token_id": ..., "idempotency_key": ...}, sql/idempotency/), so a
// joined request keeps its own caller and idempotency key, and its answer is recorded with it.
// This changes nothing in the semantics: each request is applied or refused on its own, and
// concurrent requests had no order between them to begin with.
//
// Only requests with the same group (what the call takes besides the requests: the readers of the
// results, the priority of an enqueue) are joined. A large request is a call of its own, so that it
// delays no small one.

const (
	joinMaxBytes    = 64 << 10 // a larger request is a call of its own
	joinCallBytes   = 1 << 20  // requests joined into one call, in bytes of JSON at most
	joinCallMax     = 1000     // requests joined into one call at most
	joinCallsAtOnce = 2        // joined calls in flight at once, per route
)

// writeRequest is one HTTP write request as a write route's SQL function takes it.
type writeRequest struct {
	body  []byte // the request's body: a JSON object or array, checked by readBody
	field string // the body's name in the request object (updates)
	// text, when set, is a body that goes apart from the JSON, unparsed (NDJSON): the request
	// object says "text": true in place of the body, and the call's texts hold it, one element per
	// request (empty for the others). Only a joiner made by newTextJoiner takes such requests.
	text    []byte
	tokenID *int64 // the caller's token: scopes its idempotency keys
	scope   string // the keys' scope when the caller is no token (account:<access id>); "" for none
	key     *string
}

// appendJSON appends the request object to b.
func (r writeRequest) appendJSON(b []byte) []byte {
	if r.text != nil {
		b = append(b, `{"text":true`...)
	} else {
		b = append(b, `{"`...)
		b = append(b, r.field...)
		b = append(b, `":`...)
	}
	b = append(b, r.body...)
	if r.tokenID != nil {
		b = append(b, `,"token_id":`...)
		b = strconv.AppendInt(b, *r.tokenID, 10)
	}
	if r.scope != "" {
		sc, _ := json.Marshal(r.scope) // a string always marshals
		b = append(b, `,"scope":`...)
		b = append(b, sc...)
	}
	if r.key != nil {
		k, _ := json.Marshal(*r.key) // a string always marshals
		b = append(b, `,"idempotency_key":`...)
		b = append(b, k...)
	}
	return append(b, '}')
}

// alone is the request as a call's only request: a JSON array of one, and its text.
func (r writeRequest) alone() ([]byte, []string) {
	return append(r.appendJSON([]byte{'['}), ']'), []string{string(r.text)}
}

// idempotencyKey is the request's Idempotency-Key header (nil: none). An empty header is passed on
// as empty: the SQL refuses it rather than quietly applying the request without a key.
func idempotencyKey(h map[string][]string) *string {
	v, ok := h["Idempotency-Key"]
	if !ok || len(v) == 0 {
		return nil
	}
	return &v[0]
}

// refusal is a write request the SQL refused whole (a joined call answers it with a row rather
// than an error, so that the other requests of the call go on), as the error it would have raised;
// a route whose rows carry the error's detail and hint sets them on it.
func refusal(sqlstate, reason *string) *pgconn.PgError {
	e := &pgconn.PgError{Code: "SLINV", Message: "request refused"}
	if sqlstate != nil {
		e.Code = *sqlstate
	}
	if reason != nil {
		e.Message = *reason
	}
	return e
}

// joiner joins the requests of one write route. G is what a call takes besides the requests (its
// group), R a result row; call makes one call of the route's SQL function with a JSON array of
// requests, and requestOf tells which request (from 1) a row belongs to.
type joiner[G any, R any] struct {
	call      func(ctx context.Context, group G, requests []byte, texts []string) ([]R, error)
	requestOf func(R) int32
	queue     chan *joinItem[G, R]
}

type joinItem[G any, R any] struct {
	req   writeRequest
	group G
	key   string // the group as a string: items with equal keys are joined
	reply chan joinReply[R]
}

type joinReply[R any] struct {
	rows []R
	err  error
}

func newJoiner[G any, R any](call func(context.Context, G, []byte) ([]R, error), requestOf func(R) int32) *joiner[G, R] {
	return newTextJoiner(func(ctx context.Context, g G, requests []byte, _ []string) ([]R, error) {
		return call(ctx, g, requests)
	}, requestOf)
}

// newTextJoiner is newJoiner for a route whose SQL function also takes the texts of its requests
// (writeRequest.text), one element per request.
func newTextJoiner[G any, R any](call func(context.Context, G, []byte, []string) ([]R, error), requestOf func(R) int32) *joiner[G, R] {
	j := &joiner[G, R]{call: call, requestOf: requestOf, queue: make(chan *joinItem[G, R], 4096)}
	for range joinCallsAtOnce {
		go j.run()
	}
	return j
}

// do writes one request, joined with whatever other requests of the same group are waiting, and
// returns its rows. A request over joinMaxBytes is a call of its own, in the request's context.
func (j *joiner[G, R]) do(ctx context.Context, group G, key string, req writeRequest) ([]R, error) {
	if len(req.body)+len(req.text) > joinMaxBytes {
		requests, texts := req.alone()
		return j.callRetrying(ctx, group, requests, texts)
	}
	it := &joinItem[G, R]{req: req, group: group, key: key, reply: make(chan joinReply[R], 1)}
	select {
	case j.queue <- it:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Once queued, the request is written whether or not its client waits: it may be joined
	// already, and a client that went away repeats it with its idempotency key.
	select {
	case r := <-it.reply:
		return r.rows, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (j *joiner[G, R]) run() {
	weight := func(it *joinItem[G, R]) int { return len(it.req.body) + len(it.req.text) }
	for first := range j.queue {
		items := takeWaiting(j.queue, first, joinCallMax, joinCallBytes, weight)
		for _, group := range byKey(items, func(it *joinItem[G, R]) string { return it.key }) {
			j.callGroup(group)
		}
	}
}

// takeWaiting returns first and the items waiting in queue behind it, without waiting for more,
// up to maxItems items or until their weights reach maxWeight.
func takeWaiting[T any](queue chan T, first T, maxItems, maxWeight int, weight func(T) int) []T {
	items := []T{first}
	total := weight(first)
	for len(items) < maxItems && total < maxWeight {
		select {
		case it, ok := <-queue:
			if !ok {
				return items
			}
			items = append(items, it)
			total += weight(it)
		default:
			return items
		}
	}
	return items
}

// byKey splits items into the groups of equal key, in the order the keys first came.
func byKey[T any](items []T, key func(T) string) [][]T {
	var keys []string
	groups := map[string][]T{}
	for _, it := range items {
		k := key(it)
		if _, seen := groups[k]; !seen {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], it)
	}
	out := make([][]T, len(keys))
	for i, k := range keys {
		out[i] = groups[k]
	}
	return out
}

// callGroup writes the requests of one group as one call and hands each its own rows. When the
// joined call fails for a reason that is not the database's (an input PostgreSQL refuses that the
// HTTP checks let through, such as a lone UTF-16 surrogate in a string), each request is tried on
// its own, so that only the one at fault fails.
func (j *joiner[G, R]) callGroup(items []*joinItem[G, R]) {
	buf := make([]byte, 0, 256*len(items))
	buf = append(buf, '[')
	texts := make([]string, len(items))
	for i, it := range items {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = it.req.appendJSON(buf)
		texts[i] = string(it.req.text)
	}
	buf = append(buf, ']')
	// Not the context of one request: the call serves them all.
	rows, err := j.callRetrying(context.Background(), items[0].group, buf, texts)
	if err != nil {
		if _, down := DatabaseUnavailable(err); len(items) > 1 && !down {
			for _, it := range items {
				requests, texts := it.req.alone()
				rows, err := j.callRetrying(context.Background(), it.group, requests, texts)
				it.reply <- joinReply[R]{rows: rows, err: err}
			}
			return
		}
		for _, it := range items {
			it.reply <- joinReply[R]{err: err}
		}
		return
	}
	per := make([][]R, len(items))
	for _, row := range rows {
		n := int(j.requestOf(row))
		if n < 1 || n > len(items) {
			err = fmt.Errorf("a joined write returned a row of request %d of %d", n, len(items))
			break
		}
		per[n-1] = append(per[n-1], row)
	}
	for i, it := range items {
		if err != nil {
			it.reply <- joinReply[R]{err: err}
			continue
		}
		it.reply <- joinReply[R]{rows: per[i]}
	}
}

// callRetrying makes one call for the requests (a JSON array) and their texts (retryTransient).
func (j *joiner[G, R]) callRetrying(ctx context.Context, group G, requests []byte, texts []string) ([]R, error) {
	return retryTransient(ctx, func() ([]R, error) { return j.call(ctx, group, requests, texts) })
}

// retryTransient makes a call, again when PostgreSQL aborted its transaction for a deadlock or a
// serialization failure (up to five times, backing off): two concurrent calls that touch the same
// rows in different orders can deadlock, and the rolled-back call (its idempotency keys included)
// is safe to repeat.
func retryTransient[T any](ctx context.Context, call func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		v, err := call()
		var pgErr *pgconn.PgError
		if err == nil || attempt == 5 || !errors.As(err, &pgErr) || (pgErr.Code != "40P01" && pgErr.Code != "40001") {
			return v, err
		}
		select {
		case <-time.After(time.Duration(1+attempt*attempt) * 5 * time.Millisecond):
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
	}
}
