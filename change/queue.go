package change

import "sync"

// clientQueue is a client's bounded queue of live changes, filled by the hub's fan-out and emptied
// by the client's writer. It holds no memory while empty, so idle clients stay small.
type clientQueue struct {
	mu     sync.Mutex
	items  []*message
	max    int
	notify chan struct{} // a signal that items are waiting
}

func newClientQueue(max int) *clientQueue {
	return &clientQueue{max: max, notify: make(chan struct{}, 1)}
}

// push appends m; false when the queue is full.
func (q *clientQueue) push(m *message) bool {
	q.mu.Lock()
	if len(q.items) >= q.max {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, m)
	q.mu.Unlock()
	signal(q.notify)
	return true
}

// take returns every queued item and empties the queue.
func (q *clientQueue) take() []*message {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// signal wakes whoever waits on ch (a channel of capacity one) without blocking: signals sent
// before it wakes collapse into one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
