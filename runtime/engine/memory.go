package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// Memory is the kind.Memory of tenant's documents in m. A server gives
// each run its tenant's (kind.WithMemory); a run given none has its
// store's under the tenant "", the one every caller outside a server
// shares.
func Memory(m store.Memory, tenant string) kind.Memory {
	return tenantMemory{m: m, tenant: tenant}
}

// withMemory gives a run the memory of the engine's store, unless its
// context carries one (a server's tenant's, or the parent run's for a
// child flow).
func (e *Engine) withMemory(ctx context.Context) context.Context {
	if _, ok := kind.MemoryOf(ctx); ok {
		return ctx
	}
	if m, ok := store.MemoryOf(e.Store); ok {
		return kind.WithMemory(ctx, Memory(m, ""))
	}
	return ctx
}

type tenantMemory struct {
	m      store.Memory
	tenant string
}

func fromStore(it *store.MemoryItem) (*kind.MemoryItem, error) {
	v, err := value.Decode(it.Value)
	if err != nil {
		return nil, fmt.Errorf("memory %v %q: %w", it.Namespace, it.Key, err)
	}
	return &kind.MemoryItem{Namespace: it.Namespace, Key: it.Key, Value: v, Updated: it.Updated, Expires: it.Expires, Score: it.Score}, nil
}

// refused marks what retrying cannot fix: a namespace, key or document
// the store refuses.
func refused(err error) error {
	if errors.Is(err, store.ErrMemoryKey) || errors.Is(err, store.ErrMemoryValue) {
		return kind.Permanent(err)
	}
	return err
}

func (t tenantMemory) Get(ctx context.Context, ns []string, key string) (*kind.MemoryItem, error) {
	it, err := t.m.GetMemory(ctx, t.tenant, ns, key, time.Now())
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, refused(err)
	}
	return fromStore(it)
}

func (t tenantMemory) Put(ctx context.Context, ns []string, key string, v any, opts kind.PutOptions) (*kind.MemoryItem, error) {
	it, err := newItem(ns, key, v, opts)
	if err != nil {
		return nil, err
	}
	if err := t.m.PutMemory(ctx, t.tenant, it); err != nil {
		return nil, refused(err)
	}
	return fromStore(it)
}

// PutWithStep implements kind.StepMemory: a node of a run puts its
// document with its step's checkpoint (store.Checkpoint.Memory), checked
// now, so that a document the store refuses fails the node, not the
// commit. A state that is not a run's puts at once.
func (t tenantMemory) PutWithStep(ctx context.Context, s kind.State, ns []string, key string, v any, opts kind.PutOptions) (*kind.MemoryItem, error) {
	vw, ok := s.(*view)
	if !ok || vw.run == nil {
		return t.Put(ctx, ns, key, v, opts)
	}
	it, err := newItem(ns, key, v, opts)
	if err != nil {
		return nil, err
	}
	if err := store.CheckMemoryKey(ns, key); err != nil {
		return nil, refused(err)
	}
	if err := store.CheckMemoryValue(it.Value); err != nil {
		return nil, refused(err)
	}
	if !vw.keepPut(store.MemoryPut{Tenant: t.tenant, Item: it}) {
		return nil, context.Canceled // the attempt was given up
	}
	return fromStore(it)
}

// newItem is the document a put of v under ns and key writes now.
func newItem(ns []string, key string, v any, opts kind.PutOptions) (*store.MemoryItem, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, kind.Permanent(fmt.Errorf("value: %w", err))
	}
	now := time.Now().UTC()
	it := &store.MemoryItem{Namespace: ns, Key: key, Value: b, Updated: now, Unindexed: opts.Unindexed}
	if opts.TTL > 0 {
		it.Expires = now.Add(opts.TTL)
	}
	return it, nil
}

// stepPut is a document a node of the current step put (see
// kind.StepMemory): node is the node of the step it ran in.
type stepPut struct {
	node string
	put  store.MemoryPut
}

// keepPut keeps a document the attempt put for its step's checkpoint,
// unless the attempt was given up.
func (v *view) keepPut(p store.MemoryPut) bool {
	if !v.gate.enter() {
		v.run.drop()
		return false
	}
	defer v.gate.exit()
	top := v
	for top.host != nil {
		top = top.host
	}
	r := v.run
	r.repliesMu.Lock()
	r.puts = append(r.puts, stepPut{node: top.n.Name, put: p})
	r.hasRecords.Store(true)
	r.repliesMu.Unlock()
	return true
}

// takePuts hands the documents the step's nodes put to its checkpoint:
// in the nodes' declaration order (one put over another's in a step
// wins as a reducer's later writer does), each node's in the order it
// put them.
func (r *run) takePuts() []store.MemoryPut {
	r.repliesMu.Lock()
	defer r.repliesMu.Unlock()
	if len(r.puts) == 0 {
		return nil
	}
	index := func(name string) int {
		if n, ok := r.g.Node(name); ok {
			return n.Index
		}
		return -1
	}
	slices.SortStableFunc(r.puts, func(a, b stepPut) int { return cmp.Compare(index(a.node), index(b.node)) })
	out := make([]store.MemoryPut, len(r.puts))
	for i, p := range r.puts {
		out[i] = p.put
	}
	r.puts = r.puts[:0]
	return out
}

// dropPuts forgets the documents put in a step that does not commit (it
// paused): the nodes run again, or their saved updates carry them.
func (r *run) dropPuts() {
	r.repliesMu.Lock()
	r.puts = r.puts[:0]
	r.repliesMu.Unlock()
}

// putsOf are the documents node put in the current step.
func (r *run) putsOf(node string) []store.MemoryPut {
	r.repliesMu.Lock()
	defer r.repliesMu.Unlock()
	var out []store.MemoryPut
	for _, p := range r.puts {
		if p.node == node {
			out = append(out, p.put)
		}
	}
	return out
}

// memoryWrite is the pending write (see savePending) that carries the
// documents a node put with its saved update, so that the step that
// takes the update puts them: its field names no state field.
const memoryWrite = "#memory"

// putsWrite is the pending write of puts.
func putsWrite(puts []store.MemoryPut) store.Write {
	docs := make([]any, len(puts))
	for i, p := range puts {
		d := map[string]any{"tenant": p.Tenant, "key": p.Item.Key, "value": string(p.Item.Value),
			"updated": p.Item.Updated.Format(time.RFC3339Nano)}
		ns := make([]any, len(p.Item.Namespace))
		for j, n := range p.Item.Namespace {
			ns[j] = n
		}
		d["namespace"] = ns
		if !p.Item.Expires.IsZero() {
			d["expires"] = p.Item.Expires.Format(time.RFC3339Nano)
		}
		if p.Item.Unindexed {
			d["unindexed"] = true
		}
		docs[i] = d
	}
	return store.Write{Field: memoryWrite, Value: docs}
}

// splitPuts takes the documents a saved update carries out of it.
func splitPuts(ws []store.Write) ([]store.Write, []store.MemoryPut) {
	i := slices.IndexFunc(ws, func(w store.Write) bool { return w.Field == memoryWrite })
	if i < 0 {
		return ws, nil
	}
	docs, _ := ws[i].Value.([]any)
	rest := slices.Delete(slices.Clone(ws), i, i+1)
	var puts []store.MemoryPut
	for _, d := range docs {
		m, _ := d.(map[string]any)
		it := &store.MemoryItem{}
		it.Key, _ = m["key"].(string)
		v, _ := m["value"].(string)
		it.Value = json.RawMessage(v)
		names, _ := m["namespace"].([]any)
		for _, n := range names {
			s, _ := n.(string)
			it.Namespace = append(it.Namespace, s)
		}
		if u, ok := m["updated"].(string); ok {
			it.Updated, _ = time.Parse(time.RFC3339Nano, u)
		}
		if x, ok := m["expires"].(string); ok {
			it.Expires, _ = time.Parse(time.RFC3339Nano, x)
		}
		it.Unindexed, _ = m["unindexed"].(bool)
		tenant, _ := m["tenant"].(string)
		puts = append(puts, store.MemoryPut{Tenant: tenant, Item: it})
	}
	return rest, puts
}

// keepSavedPuts keeps the documents a saved update carries for the step
// that takes it.
func (r *run) keepSavedPuts(node string, puts []store.MemoryPut) {
	if len(puts) == 0 {
		return
	}
	r.repliesMu.Lock()
	for _, p := range puts {
		r.puts = append(r.puts, stepPut{node: node, put: p})
	}
	r.hasRecords.Store(true)
	r.repliesMu.Unlock()
}

func (t tenantMemory) Delete(ctx context.Context, ns []string, key string) (bool, error) {
	err := t.m.DeleteMemory(ctx, t.tenant, ns, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, refused(err)
}

func (t tenantMemory) Search(ctx context.Context, ns []string, query string, limit int) ([]*kind.MemoryItem, error) {
	items, err := t.m.SearchMemory(ctx, t.tenant, store.MemoryQuery{Prefix: ns, Text: query, Limit: limit, Now: time.Now()})
	if err != nil {
		return nil, refused(err)
	}
	out := make([]*kind.MemoryItem, 0, len(items))
	for _, it := range items {
		k, err := fromStore(it)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
