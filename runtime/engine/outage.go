package engine

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// storeWatch reports a run's waits for its store as events, for a run
// that waits with a Retrier the engine made (Request.Retry unset): an
// outage's beginning (store_unavailable, with the error) and its end
// (store_back, with how long it lasted), between the run's run_start and
// its last event. A wait before the run starts or after it ends is not
// reported: a run refused before it starts emits nothing, and its last
// event ends its stream.
type storeWatch struct {
	mu sync.Mutex
	r  *run // set while the run's events may be emitted
}

// retrier is the run's Retrier, with a budget of wait (0: the store's
// default), reporting to w.
func (w *storeWatch) retrier(wait time.Duration) *store.Retrier {
	return &store.Retrier{Budget: wait,
		Down: func(err error) { w.emit(Event{Type: StoreUnavailable, Error: err.Error()}) },
		Back: func(lasted time.Duration) { w.emit(Event{Type: StoreBack, Duration: lasted}) }}
}

// begin starts reporting for r, once it has emitted run_start.
func (w *storeWatch) begin(r *run) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.r = r
	w.mu.Unlock()
}

// end stops reporting, before r emits its last event.
func (w *storeWatch) end() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.r = nil
	w.mu.Unlock()
}

func (w *storeWatch) emit(ev Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.r != nil && w.r.req.Observe != nil {
		w.r.emit(ev)
	}
}

// writeIDs number the checkpoints this process commits (store.Checkpoint
// WriteID): the process's random prefix and a counter, unique without a
// read of the system's randomness per step.
var writeIDs atomic.Uint64

func writeID() string {
	var b [32]byte
	id := append(append(b[:0], runPrefix...), '.')
	return string(strconv.AppendUint(id, writeIDs.Add(1), 36))
}
