package sqlstore

import "sync"

// Waiting is the queue of the writes that wait for a group commit (the
// stores' group.go): added in the order they come, taken a group at a
// time, and dropped by one whose caller gave up before its group was
// taken.
type Waiting[J comparable] struct {
	mu   sync.Mutex
	jobs []J
}

// Add queues j.
func (w *Waiting[J]) Add(j J) {
	w.mu.Lock()
	w.jobs = append(w.jobs, j)
	w.mu.Unlock()
}

// Take removes and returns up to max waiting writes, the oldest first.
func (w *Waiting[J]) Take(max int) []J {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := min(len(w.jobs), max)
	out := w.jobs[:n:n]
	w.jobs = append([]J(nil), w.jobs[n:]...)
	return out
}

// Drop removes j if it still waits, and reports whether it did.
func (w *Waiting[J]) Drop(j J) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, v := range w.jobs {
		if v == j {
			w.jobs = append(w.jobs[:i], w.jobs[i+1:]...)
			return true
		}
	}
	return false
}

// Len is the number of writes waiting.
func (w *Waiting[J]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.jobs)
}
