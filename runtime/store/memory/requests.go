package memory

import (
	"context"
	"slices"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

func copyRequest(r *store.RequestRecord) *store.RequestRecord {
	cp := *r
	cp.Body = slices.Clone(r.Body)
	return &cp
}

// ReserveRequest implements store.Requests.
func (s *Store) ReserveRequest(_ context.Context, r *store.RequestRecord, notBefore time.Time) (*store.RequestRecord, bool, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{r.Tenant, r.Key}
	if had, ok := c.requests[k]; ok && !had.Created.Before(notBefore) {
		return copyRequest(had), false, nil
	}
	c.requests[k] = copyRequest(r)
	return copyRequest(r), true, nil
}

// TakeRequest implements store.Requests.
func (s *Store) TakeRequest(_ context.Context, tenant, key, from, owner string, until time.Time) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.requests[[2]string{tenant, key}]
	switch {
	case !ok:
		return store.ErrNotFound
	case r.Owner != from || r.Status != 0:
		return store.ErrClaimLost
	}
	r.Owner, r.Locked = owner, until
	return nil
}

// AnswerRequest implements store.Requests.
func (s *Store) AnswerRequest(_ context.Context, tenant, key, thread string, status int, body []byte) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.requests[[2]string{tenant, key}]
	if !ok {
		return store.ErrNotFound
	}
	if r.Status == 0 {
		r.Status, r.Body = status, slices.Clone(body)
		if thread != "" {
			r.Thread = thread
		}
	}
	return nil
}

// ReleaseRequest implements store.Requests.
func (s *Store) ReleaseRequest(_ context.Context, tenant, key, owner string) error {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	k := [2]string{tenant, key}
	if r, ok := c.requests[k]; ok && r.Owner == owner && r.Status == 0 {
		delete(c.requests, k)
	}
	return nil
}

// PruneRequests implements store.Requests.
func (s *Store) PruneRequests(_ context.Context, before time.Time, limit int) (int, error) {
	c := s.cat()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k, r := range c.requests {
		if n == limit {
			break
		}
		if r.Created.Before(before) {
			delete(c.requests, k)
			n++
		}
	}
	return n, nil
}

var _ store.Requests = (*Store)(nil)
