package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// The memory routes read and write what the tenant's flows remember
// across threads (memory nodes' documents). A key reaches its tenant's
// documents only: another tenant's are not found, as if they did not
// exist.

// maxTTL bounds a document's ttl_seconds (ten years).
const maxTTL = 10 * 365 * 24 * time.Hour

// memory is the store's memory, or an error saying it keeps none.
func (s *Server) memory() (store.Memory, error) {
	m, ok := store.MemoryOf(s.eng().Store)
	if !ok {
		return nil, &api.Error{Code: api.CodeUnavailable, Message: "this server's store keeps no memory"}
	}
	return m, nil
}

// withTenantMemory is ctx whose runs read and write tenant's memory in
// the store, so that no tenant sees another's (as
// trellis.Runtime.WithTenantMemory gives it); ctx as it is on a store
// that keeps none.
func (s *Server) withTenantMemory(ctx context.Context, tenant string) context.Context {
	m, ok := store.MemoryOf(s.eng().Store)
	if !ok {
		return ctx
	}
	return kind.WithMemory(ctx, engine.Memory(m, tenant))
}

// memoryError says why the store refused a namespace, key or document.
func memoryError(err error) error {
	if errors.Is(err, store.ErrMemoryKey) || errors.Is(err, store.ErrMemoryValue) {
		return &api.Error{Code: api.CodeInvalidInput, Message: err.Error()}
	}
	return err
}

func memoryItem(it *store.MemoryItem, scored bool) api.MemoryItem {
	out := api.MemoryItem{Namespace: it.Namespace, Key: it.Key, Value: it.Value, Updated: it.Updated.UTC()}
	if !it.Expires.IsZero() {
		e := it.Expires.UTC()
		out.Expires = &e
	}
	if scored {
		sc := it.Score
		out.Score = &sc
	}
	return out
}

// documentKey reads the namespace (repeated, in order) and key of the
// query string.
func documentKey(r *http.Request) ([]string, string, error) {
	q := r.URL.Query()
	ns, key := q["namespace"], q.Get("key")
	if len(ns) == 0 || !q.Has("key") {
		return nil, "", &api.Error{Code: api.CodeInvalidInput, Message: "name the document: ?namespace=NAME (once per name, in order)&key=KEY"}
	}
	return ns, key, nil
}

func (s *Server) putMemory(w http.ResponseWriter, r *http.Request, c *caller) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	var in struct {
		api.PutMemory
		TTLSeconds *int64 `json:"ttl_seconds"` // given as 0, it is refused
	}
	if err := readJSON(r, &in); err != nil {
		return err
	}
	switch {
	case in.Value == nil:
		return &api.Error{Code: api.CodeInvalidInput, Message: "value is required: the document, any JSON value"}
	case in.TTLSeconds != nil && (*in.TTLSeconds < 1 || *in.TTLSeconds > int64(maxTTL/time.Second)):
		return &api.Error{Code: api.CodeInvalidInput, Message: "ttl_seconds is from 1 to " + strconv.FormatInt(int64(maxTTL/time.Second), 10) + " (none: kept until replaced or deleted)"}
	}
	// a document holds what a run's value may: no number past a float's
	// range (which no JSON reader would take back)
	if _, err := value.Decode(in.Value); err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			return &api.Error{Code: api.CodeInvalidInput, Message: "value: " + numberOutOfRange(ne.Num), Details: map[string]string{"field": "value"}}
		}
		return &api.Error{Code: api.CodeInvalidInput, Message: "value: " + err.Error(), Details: map[string]string{"field": "value"}}
	}
	it := &store.MemoryItem{Namespace: in.Namespace, Key: in.Key, Value: in.Value, Updated: time.Now().UTC(),
		Unindexed: in.Index != nil && !*in.Index}
	if in.TTLSeconds != nil {
		it.Expires = it.Updated.Add(time.Duration(*in.TTLSeconds) * time.Second)
	}
	if err := m.PutMemory(r.Context(), c.tenant, it); err != nil {
		return memoryError(err)
	}
	made(r, "")
	writeJSON(w, http.StatusOK, memoryItem(it, false))
	return nil
}

func (s *Server) getMemory(w http.ResponseWriter, r *http.Request, c *caller) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, key, err := documentKey(r)
	if err != nil {
		return err
	}
	it, err := m.GetMemory(r.Context(), c.tenant, ns, key, time.Now())
	if err != nil {
		return memoryError(err)
	}
	writeJSON(w, http.StatusOK, memoryItem(it, false))
	return nil
}

func (s *Server) deleteMemory(w http.ResponseWriter, r *http.Request, c *caller) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, key, err := documentKey(r)
	if err != nil {
		return err
	}
	if err := m.DeleteMemory(r.Context(), c.tenant, ns, key); err != nil {
		return memoryError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// memoryPage checks a listing's limit (given, 1 or more) and offset, and
// returns the limit the store takes (0: its default).
func memoryPage(limit *int, offset int) (int, error) {
	if limit != nil && (*limit < 1 || *limit > store.MaxMemoryLimit) || offset < 0 {
		return 0, &api.Error{Code: api.CodeInvalidInput, Message: "limit is from 1 to " + strconv.Itoa(store.MaxMemoryLimit) + " (default " + strconv.Itoa(store.DefaultMemoryLimit) + "), offset 0 or more"}
	}
	if limit == nil {
		return 0, nil
	}
	return *limit, nil
}

func (s *Server) searchMemory(w http.ResponseWriter, r *http.Request, c *caller) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	var in struct {
		api.SearchMemory
		Limit *int `json:"limit"` // given as 0, it is refused
	}
	if err := readJSON(r, &in); err != nil {
		return err
	}
	limit, err := memoryPage(in.Limit, in.Offset)
	if err != nil {
		return err
	}
	items, err := m.SearchMemory(r.Context(), c.tenant, store.MemoryQuery{Prefix: in.NamespacePrefix, Text: in.Query,
		Limit: limit, Offset: in.Offset, Now: time.Now()})
	if err != nil {
		return memoryError(err)
	}
	out := api.MemoryItems{Items: make([]api.MemoryItem, 0, len(items))}
	for _, it := range items {
		out.Items = append(out.Items, memoryItem(it, in.Query != ""))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) memoryNamespaces(w http.ResponseWriter, r *http.Request, c *caller) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	var in struct {
		api.ListNamespaces
		Limit *int `json:"limit"` // given as 0, it is refused
	}
	if err := readJSON(r, &in); err != nil {
		return err
	}
	limit, err := memoryPage(in.Limit, in.Offset)
	if err != nil {
		return err
	}
	nss, err := m.MemoryNamespaces(r.Context(), c.tenant, store.MemoryQuery{Prefix: in.Prefix, Limit: limit, Offset: in.Offset, Now: time.Now()})
	if err != nil {
		return memoryError(err)
	}
	out := api.Namespaces{Namespaces: make([][]string, 0, len(nss))}
	out.Namespaces = append(out.Namespaces, nss...)
	writeJSON(w, http.StatusOK, out)
	return nil
}
