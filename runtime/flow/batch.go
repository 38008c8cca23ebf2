package flow

import (
	"slices"
	"sync"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Batch shares the compilation of flow files between the loads of one
// batch, such as validating a directory: a flow one of them runs as a
// subflow and another loads itself (or runs too) is compiled once, its
// diagnostics and graph the same for each. The graphs of a batch are
// shared between its loads, so they are for reading (validating,
// drawing) only. A Batch is safe for concurrent use.
type Batch struct {
	mu    sync.Mutex
	flows map[string]*batchFlow // by file URL
	seq   int
}

// NewBatch returns an empty batch.
func NewBatch() *Batch { return &Batch{flows: map[string]*batchFlow{}} }

type batchFlow struct {
	done chan struct{}
	res  *compiled
	// seq orders the loads of the batch by their start: a compilation
	// waits only for a load started after its own, so that no two wait
	// for each other
	seq int
}

// compiled is what compiling one flow file gave: its graph (nil with
// errors), its diagnostics and the files it read, and what a flow that
// runs it as a subflow needs of it.
type compiled struct {
	g       *Graph
	dl      diag.List
	sources diag.Sources
	state   *schema.Shape
	unset   map[string]string
	// includes are the flow files the compilation compiled (itself
	// too); cycle is set when it found flows that include each other,
	// which it reports as seen from where it started.
	includes map[string]bool
	cycle    bool
}

// result gathers what the compilation of g gave.
func (c *compiler) result(g *Graph) *compiled {
	r := &compiled{g: g, dl: c.dl, sources: c.sources, state: c.stateShape, includes: c.included}
	if g != nil {
		r.unset = c.unsetAtEnd()
	}
	r.cycle = slices.ContainsFunc(c.dl, func(d diag.Diagnostic) bool { return d.Code == diag.CodeSubflowCycle })
	return r
}

// reusable returns the compilation of the file id in the batch, when its
// result does not depend on being compiled within chain (the files
// running it, outermost first): nil otherwise, or when b is nil. One
// under way in a load started after seq's is waited for.
func (b *Batch) reusable(id string, chain []string, seq int) *compiled {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	f, ok := b.flows[id]
	b.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-f.done:
	default:
		if f.seq <= seq {
			return nil // under way in an earlier load: compiled here too
		}
		<-f.done
	}
	if f.res == nil || f.res.cycle || slices.ContainsFunc(chain, func(u string) bool { return f.res.includes[u] }) {
		return nil
	}
	return f.res
}

// keep records a finished compilation of the file id, unless one is
// there.
func (b *Batch) keep(id string, res *compiled) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.flows[id]; !ok {
		f := &batchFlow{done: make(chan struct{}), res: res}
		close(f.done)
		b.flows[id] = f
	}
}

// Compile is Compile (below) within the batch: a flow file compiled
// before in the batch (loaded, or run as a subflow) is not compiled
// again; one under way in another load is waited for.
func (b *Batch) Compile(files *config.Files, path string, reg kind.Registry) (*Graph, diag.List, diag.Sources) {
	if files == nil {
		files = config.Disk()
	}
	id := files.URL(path)
	for {
		b.mu.Lock()
		f, ok := b.flows[id]
		if !ok {
			b.seq++
			f = &batchFlow{done: make(chan struct{}), seq: b.seq}
			b.flows[id] = f
			b.mu.Unlock()
			g, dl, sources, res := compileIn(b, f.seq, files, path, nil, reg)
			f.res = res
			close(f.done)
			return g, dl, sources
		}
		b.mu.Unlock()
		<-f.done
		if r := f.res; r != nil && !r.cycle {
			dl := slices.Clone(r.dl).Sort()
			g := r.g
			if dl.HasErrors() {
				g = nil
			}
			return g, dl, r.sources
		}
		// compiled with a cycle, reported as seen from elsewhere: on its
		// own, for this load
		g, dl, sources, _ := compileIn(nil, 0, files, path, nil, reg)
		return g, dl, sources
	}
}
