package engine

import (
	"strconv"
	"strings"
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
	rt store.Retrier
}

// retrier is the run's Retrier (w's own), with a budget of wait (0: the
// store's default), reporting to w.
func (w *storeWatch) retrier(wait time.Duration) *store.Retrier {
	w.rt.Budget = wait
	w.rt.Down = func(err error) { w.emit(Event{Type: StoreUnavailable, Error: err.Error()}) }
	w.rt.Back = func(lasted time.Duration) { w.emit(Event{Type: StoreBack, Duration: lasted}) }
	return &w.rt
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

// writeIDs number the blocks of write ids this process gives its
// checkpoints (store.Checkpoint.WriteID): an id is the process's random
// prefix, its block's number and its place in the block, unique without
// a read of the system's randomness per step.
var writeIDs atomic.Uint64

// writeIDBlock is how many write ids a run takes at a time: they are
// written into one string, so that a step's checkpoint costs no
// allocation of its own for its id. It is the length of idDigits.
const writeIDBlock = 32

// idDigits name the places in a block.
const idDigits = "0123456789abcdefghijklmnopqrstuv"

// writeID returns the run's next write id, taking a block of them when
// the last is used up. Each is a distinct substring of the block's one
// string; ids are unique in the process whichever run takes them.
func (r *run) writeID() string {
	if r.idAt == writeIDBlock || r.idBlock == "" {
		var b [32]byte
		head := strconv.AppendUint(append(append(b[:0], runPrefix...), '.'), writeIDs.Add(1), 36)
		head = append(head, '.')
		var block strings.Builder
		block.Grow(writeIDBlock * (len(head) + 1))
		for i := range writeIDBlock {
			block.Write(head)
			block.WriteByte(idDigits[i])
		}
		r.idBlock, r.idSize, r.idAt = block.String(), len(head)+1, 0
	}
	at := r.idAt * r.idSize
	r.idAt++
	return r.idBlock[at : at+r.idSize]
}
