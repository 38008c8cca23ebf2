package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// MemoryItem is a document the tenant's flows remember across threads
// (a memory node's), under a namespace and a key.
type MemoryItem struct {
	Namespace []string        `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Updated   time.Time       `json:"updated"`
	// Expires is when it is forgotten (none: never).
	Expires *time.Time `json:"expires,omitempty"`
	// Score is how well a search's query matched it (searches with a
	// query only).
	Score *float64 `json:"score,omitempty"`
}

// PutMemory writes a document, replacing the one under the same
// namespace and key.
type PutMemory struct {
	Namespace []string        `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	// TTLSeconds, when set, forgets the document that many seconds after
	// it is written.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// Index, set to false, keeps the document's words out of the
	// full-text index: a search with a query never finds it, one without
	// does (none: true).
	Index *bool `json:"index,omitempty"`
}

// SearchMemory lists the documents under a namespace prefix: with a
// query, those whose strings hold all its words, best first; without,
// the most recently updated first.
type SearchMemory struct {
	NamespacePrefix []string `json:"namespace_prefix,omitempty"`
	Query           string   `json:"query,omitempty"`
	Limit           int      `json:"limit,omitempty"`
	Offset          int      `json:"offset,omitempty"`
}

// MemoryItems is a page of documents.
type MemoryItems struct {
	Items []MemoryItem `json:"items"`
}

// ListNamespaces lists the namespaces under a prefix that hold documents.
type ListNamespaces struct {
	Prefix []string `json:"prefix,omitempty"`
	Limit  int      `json:"limit,omitempty"`
	Offset int      `json:"offset,omitempty"`
}

// Namespaces is a page of namespaces, in order.
type Namespaces struct {
	Namespaces [][]string `json:"namespaces"`
}

// memoryQuery is the query string naming one document.
func memoryQuery(ns []string, key string) string {
	q := url.Values{"namespace": ns, "key": {key}}
	return "?" + q.Encode()
}

// PutMemory writes a document to the tenant's memory.
func (c *Client) PutMemory(ctx context.Context, p PutMemory) (*MemoryItem, error) {
	var out MemoryItem
	err := c.do(ctx, http.MethodPut, "/v1/memory/items", p, &out)
	return &out, err
}

// Memory reads a document of the tenant's memory.
func (c *Client) Memory(ctx context.Context, ns []string, key string) (*MemoryItem, error) {
	var out MemoryItem
	err := c.do(ctx, http.MethodGet, "/v1/memory/items"+memoryQuery(ns, key), nil, &out)
	return &out, err
}

// DeleteMemory deletes a document of the tenant's memory.
func (c *Client) DeleteMemory(ctx context.Context, ns []string, key string) error {
	return c.do(ctx, http.MethodDelete, "/v1/memory/items"+memoryQuery(ns, key), nil, nil)
}

// SearchMemory lists or searches the tenant's memory.
func (c *Client) SearchMemory(ctx context.Context, s SearchMemory) ([]MemoryItem, error) {
	var out MemoryItems
	err := c.do(ctx, http.MethodPost, "/v1/memory/items/search", s, &out)
	return out.Items, err
}

// MemoryNamespaces lists the namespaces of the tenant's memory.
func (c *Client) MemoryNamespaces(ctx context.Context, l ListNamespaces) ([][]string, error) {
	var out Namespaces
	err := c.do(ctx, http.MethodPost, "/v1/memory/namespaces", l, &out)
	return out.Namespaces, err
}
