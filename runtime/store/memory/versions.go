package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/trellisflow/trellis/runtime/store"
)

// flowVersions is the memory store's store.Versions: each file once by
// its hash, each version's manifest, each thread's version.
type flowVersions struct {
	mu       sync.Mutex
	files    map[string][]byte
	versions map[[2]string]*versionEntry
	pins     map[string]store.ThreadPin
	promoted map[string]store.Promotion
}

type versionEntry struct {
	v        store.FlowVersion // without its files
	manifest map[string]string
}

func (fv *flowVersions) init() {
	if fv.files == nil {
		fv.files, fv.versions, fv.pins = map[string][]byte{}, map[[2]string]*versionEntry{}, map[string]store.ThreadPin{}
		fv.promoted = map[string]store.Promotion{}
	}
}

// PutFlowVersion implements store.Versions.
func (s *Store) PutFlowVersion(_ context.Context, v *store.FlowVersion) error {
	if err := store.CheckFlowVersion(v); err != nil {
		return err
	}
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	fv.init()
	key := [2]string{v.Flow, v.Version}
	if fv.versions[key] != nil {
		return nil
	}
	e := &versionEntry{v: store.FlowVersion{Flow: v.Flow, Version: v.Version, Path: v.Path, Created: v.Created}, manifest: map[string]string{}}
	for name, data := range v.Files {
		h := store.FileHash(data)
		if _, ok := fv.files[h]; !ok {
			fv.files[h] = slices.Clone(data)
		}
		e.manifest[name] = h
	}
	fv.versions[key] = e
	return nil
}

// FlowVersion implements store.Versions.
func (s *Store) FlowVersion(_ context.Context, flow, version string) (*store.FlowVersion, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	e := fv.versions[[2]string{flow, version}]
	if e == nil {
		return nil, store.ErrNotFound
	}
	out := e.v
	out.Files = make(map[string][]byte, len(e.manifest))
	for name, h := range e.manifest {
		out.Files[name] = slices.Clone(fv.files[h])
	}
	return &out, nil
}

// FlowVersions implements store.Versions.
func (s *Store) FlowVersions(_ context.Context, flow string) ([]*store.FlowVersion, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	var out []*store.FlowVersion
	for key, e := range fv.versions {
		if key[0] == flow {
			v := e.v
			out = append(out, &v)
		}
	}
	slices.SortFunc(out, func(a, b *store.FlowVersion) int {
		return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(a.Version, b.Version))
	})
	if len(out) > store.MaxPage {
		out = out[:store.MaxPage]
	}
	return out, nil
}

// PinThread implements store.Versions.
func (s *Store) PinThread(_ context.Context, p *store.ThreadPin, expect string) error {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	fv.init()
	cur, had := fv.pins[p.Thread]
	switch {
	case expect == "" && had, expect != "" && (!had || cur.Tenant != p.Tenant || cur.Version != expect):
		return store.ErrPinChanged
	}
	fv.pins[p.Thread] = *p
	return nil
}

// ThreadPin implements store.Versions.
func (s *Store) ThreadPin(_ context.Context, tenant, thread string) (*store.ThreadPin, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	p, ok := fv.pins[thread]
	if !ok || p.Tenant != tenant {
		return nil, store.ErrNotFound
	}
	return &p, nil
}

// ThreadPins implements store.Versions.
func (s *Store) ThreadPins(_ context.Context, q store.PinQuery) ([]*store.ThreadPin, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	var out []*store.ThreadPin
	for _, id := range slices.Sorted(maps.Keys(fv.pins)) {
		p := fv.pins[id]
		if p.Tenant != q.Tenant || p.Flow != q.Flow || id <= q.After || q.Version != "" && p.Version != q.Version {
			continue
		}
		out = append(out, &p)
		if len(out) == store.PageLimit(q.Limit) {
			break
		}
	}
	return out, nil
}

// CountPins implements store.Versions.
func (s *Store) CountPins(_ context.Context, tenant, flow string) (map[string]int, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	out := map[string]int{}
	for _, p := range fv.pins {
		if p.Tenant == tenant && p.Flow == flow {
			out[p.Version]++
		}
	}
	return out, nil
}

// forget drops a deleted thread's version.
func (fv *flowVersions) forget(thread string) {
	fv.mu.Lock()
	defer fv.mu.Unlock()
	delete(fv.pins, thread)
}

// PromoteVersion implements store.Promotions.
func (s *Store) PromoteVersion(_ context.Context, p *store.Promotion, onlyIfNone bool) (bool, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	fv.init()
	if fv.versions[[2]string{p.Flow, p.Version}] == nil {
		return false, store.ErrNotFound
	}
	if _, had := fv.promoted[p.Flow]; had && onlyIfNone {
		return false, nil
	}
	fv.promoted[p.Flow] = *p
	return true, nil
}

// PromotedVersion implements store.Promotions.
func (s *Store) PromotedVersion(_ context.Context, flow string) (*store.Promotion, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	p, ok := fv.promoted[flow]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &p, nil
}

// PromotedVersions implements store.Promotions.
func (s *Store) PromotedVersions(_ context.Context) ([]*store.Promotion, error) {
	fv := &s.flowVersions
	fv.mu.Lock()
	defer fv.mu.Unlock()
	out := make([]*store.Promotion, 0, len(fv.promoted))
	for _, flow := range slices.Sorted(maps.Keys(fv.promoted)) {
		p := fv.promoted[flow]
		out = append(out, &p)
	}
	return out, nil
}

var (
	_ store.Versions   = (*Store)(nil)
	_ store.Promotions = (*Store)(nil)
)
