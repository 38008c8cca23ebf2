package kind

import (
	"context"
	"errors"
	"time"
)

// Memory is what runs remember across threads: JSON documents, each under
// a namespace (a list of names) and a key, found again by namespace
// prefix and by the words of their strings. It is a run's, not a flow's:
// the engine gives each run the memory of its store (on a server, of the
// run's tenant), and a node reads it from its context with MemoryOf.
type Memory interface {
	// Get returns the document under ns and key, or nil when there is
	// none (or it expired).
	Get(ctx context.Context, ns []string, key string) (*MemoryItem, error)
	// Put writes value under ns and key, replacing what was there, as
	// opts say.
	Put(ctx context.Context, ns []string, key string, value any, opts PutOptions) (*MemoryItem, error)
	// Delete deletes the document under ns and key and reports whether
	// there was one.
	Delete(ctx context.Context, ns []string, key string) (bool, error)
	// Search lists up to limit documents under the namespace prefix ns:
	// with query, those holding all its words, best first; without, the
	// most recently updated first.
	Search(ctx context.Context, ns []string, query string, limit int) ([]*MemoryItem, error)
}

// StepMemory is a Memory that writes a node's puts with the step the node
// runs in (s is the node's state): in the step's transaction, so that a
// step committed has put them and one that was not (the process died
// first, the commit failed) has put none. The item returned is the one
// the step will write. A Memory that is not one puts at once.
type StepMemory interface {
	PutWithStep(ctx context.Context, s State, ns []string, key string, value any, opts PutOptions) (*MemoryItem, error)
}

// PutOptions are how a document is put.
type PutOptions struct {
	// TTL > 0: the document is forgotten after TTL.
	TTL time.Duration
	// Unindexed keeps the document's words out of the full-text index:
	// a search with a query never finds it, one without does, and the
	// put costs no index update.
	Unindexed bool
}

// MemoryItem is one remembered document.
type MemoryItem struct {
	Namespace []string
	Key       string
	Value     any
	Updated   time.Time
	// Expires is when it is forgotten (zero: never).
	Expires time.Time
	// Score is how well a search's query matched it.
	Score float64
}

// ErrNoMemory: a run with no memory, as on a store that keeps none.
var ErrNoMemory = errors.New("this run has no memory: its store keeps no documents across threads")

type memoryKey struct{}

// WithMemory returns ctx carrying m, the memory the runs started with it
// read and write.
func WithMemory(ctx context.Context, m Memory) context.Context {
	return context.WithValue(ctx, memoryKey{}, m)
}

// MemoryOf returns the memory ctx carries.
func MemoryOf(ctx context.Context) (Memory, bool) {
	m, ok := ctx.Value(memoryKey{}).(Memory)
	return m, ok && m != nil
}
