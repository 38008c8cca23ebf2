package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
)

// interviewOf runs an interview thread of a tenant through its greeting
// and answers turns, with no model, and returns the questions it asked
// and its last state.
func interviewOf(t *testing.T, c *api.Client, thread, interviewID, user string, answers int) ([]string, map[string]any) {
	t.Helper()
	v := values(t, flowsDir+"/examples/candidate.yaml")
	v["interview_id"], v["user_id"], v["max_questions"] = interviewID, user, answers
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: thread, Flow: "interview", Values: v}); err != nil {
		t.Fatal(err)
	}
	var last *api.Run
	for i := range answers + 1 {
		in := map[string]any{}
		if i > 0 {
			in["last_response"] = "I built the indexer with Go and Kafka, designed the writers myself and tuned backpressure with bounded queues."
		}
		var err error
		if last, err = c.RunWait(ctx, thread, api.StartRun{Input: in}); err != nil || last.Status != api.RunSucceeded {
			t.Fatalf("%s turn %d: %+v %v", thread, i, last, err)
		}
	}
	var asked []string
	for _, q := range last.State["questions_asked"].([]any) {
		asked = append(asked, q.(map[string]any)["text"].(string))
	}
	return asked, last.State
}

// The interview remembers a candidate across two threads through the API,
// with no model: the second interview of the same candidate recalls the
// first one's questions and asks others; the questions are the tenant's
// memory, read and searched through the memory routes; another tenant's
// interview of a candidate with the same id remembers nothing of them.
func TestInterviewRemembersTheCandidateThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b.addr, nil, func(c *Config) { c.Kinds = all.Offline() })
			first, _ := interviewOf(t, h.acme, "ada-1", "i-1", "ada", 3)
			if len(first) != 3 {
				t.Fatalf("the first interview asked %q", first)
			}
			// what the tenant's memory holds: the first interview's questions
			items, err := h.acme.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: []string{"candidates", "ada"}, Limit: 100})
			if err != nil || len(items) != 3 {
				t.Fatalf("acme's memory of ada: %d items, %v", len(items), err)
			}
			for i, it := range items {
				var doc struct {
					Text        string `json:"text"`
					InterviewID string `json:"interview_id"`
				}
				if err := json.Unmarshal(it.Value, &doc); err != nil || doc.InterviewID != "i-1" || doc.Text != first[2-i] ||
					!slices.Equal(it.Namespace, []string{"candidates", "ada", "questions"}) {
					t.Fatalf("item %d: %+v (%s) %v", i, it, it.Value, err)
				}
			}
			second, state := interviewOf(t, h.acme, "ada-2", "i-2", "ada", 3)
			if len(state["previous_questions"].([]any)) != 3 {
				t.Fatalf("the second interview recalled %v", state["previous_questions"])
			}
			for _, q := range second {
				if slices.Contains(first, q) {
					t.Errorf("the second interview repeated %q", q)
				}
			}
			// the greeting said it
			hist, err := h.acme.History(ctx, "ada-2", nil)
			if err != nil {
				t.Fatal(err)
			}
			greeted := false
			for _, cp := range hist {
				for _, w := range cp.Writes {
					if s, ok := w.Value.(string); ok && w.Field == "next_message" && strings.HasPrefix(s, "Hi Ada, good to see you again") {
						greeted = true
					}
				}
			}
			if !greeted {
				t.Error("the second interview did not welcome the candidate back")
			}
			// another tenant's candidate ada is another person: asked the
			// first interview's questions, and finding none of acme's
			other, state := interviewOf(t, h.globex, "ada-1", "i-1", "ada", 3)
			if !slices.Equal(other, first) || len(state["previous_questions"].([]any)) != 0 {
				t.Fatalf("globex's interview asked %q recalling %v; acme's first asked %q", other, state["previous_questions"], first)
			}
			found, err := h.globex.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: []string{"candidates"}, Query: "indexer", Limit: 100})
			if err != nil || len(found) == 0 {
				t.Fatalf("globex's own search: %v %v", found, err)
			}
			for _, it := range found {
				if !strings.Contains(string(it.Value), `"interview_id":"i-1"`) || it.Score == nil {
					t.Fatalf("globex finds %+v (%s)", it, it.Value)
				}
			}
			acmeAll, _ := h.acme.SearchMemory(ctx, api.SearchMemory{Limit: 100})
			globexAll, _ := h.globex.SearchMemory(ctx, api.SearchMemory{Limit: 100})
			if len(acmeAll) != 6 || len(globexAll) != 3 {
				t.Fatalf("acme holds %d documents, globex %d", len(acmeAll), len(globexAll))
			}
		})
	}
}

// The memory routes read, write, list, search and delete a tenant's
// documents, and refuse what is malformed with invalid_input; every
// answer matches schemas/openapi.yaml.
func TestMemoryRoutes(t *testing.T) {
	h := newHarness(t, "sqlite", nil)
	ns := []string{"candidates", "ada", "notes"}
	before := time.Now().UTC().Add(-time.Second)
	put, err := h.acme.PutMemory(ctx, api.PutMemory{Namespace: ns, Key: "n1", Value: json.RawMessage(`{"text": "Prefers Go; asked about Kafka.", "big": 12345678901234567890}`), TTLSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	if put.Expires == nil || put.Expires.Sub(put.Updated) != time.Hour || put.Updated.Before(before) {
		t.Fatalf("put %+v", put)
	}
	if _, err := h.acme.PutMemory(ctx, api.PutMemory{Namespace: []string{"candidates", "grace", "notes"}, Key: "n1", Value: json.RawMessage(`"Kafka again"`)}); err != nil {
		t.Fatal(err)
	}
	got, err := h.acme.Memory(ctx, ns, "n1")
	if err != nil || !strings.Contains(string(got.Value), "12345678901234567890") || !got.Updated.Equal(put.Updated) || !got.Expires.Equal(*put.Expires) {
		t.Fatalf("get %+v (%s) %v", got, got.Value, err)
	}
	found, err := h.acme.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: []string{"candidates"}, Query: "KAFKA"})
	if err != nil || len(found) != 2 || found[0].Score == nil {
		t.Fatalf("search: %+v %v", found, err)
	}
	if found, _ := h.acme.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: ns, Query: "kafka"}); len(found) != 1 || found[0].Key != "n1" {
		t.Fatalf("search under a/b/c: %+v", found)
	}
	// put with index false: listed and got, never found by its words
	no := false
	if _, err := h.acme.PutMemory(ctx, api.PutMemory{Namespace: []string{"candidates", "grace", "notes"}, Key: "n2", Value: json.RawMessage(`"Kafka once more"`), Index: &no}); err != nil {
		t.Fatal(err)
	}
	if found, _ := h.acme.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: []string{"candidates"}, Query: "kafka"}); len(found) != 2 {
		t.Fatalf("search after an unindexed put: %+v, want the two indexed", found)
	}
	if listed, _ := h.acme.SearchMemory(ctx, api.SearchMemory{NamespacePrefix: []string{"candidates", "grace"}}); len(listed) != 2 || listed[0].Key != "n2" {
		t.Fatalf("listing after an unindexed put: %+v, want it first", listed)
	}
	nss, err := h.acme.MemoryNamespaces(ctx, api.ListNamespaces{Prefix: []string{"candidates"}})
	if err != nil || len(nss) != 2 || !slices.Equal(nss[0], ns) {
		t.Fatalf("namespaces %v %v", nss, err)
	}
	if err := h.acme.DeleteMemory(ctx, ns, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.acme.Memory(ctx, ns, "n1"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := h.acme.DeleteMemory(ctx, ns, "n1"); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	for _, c := range []struct {
		method, path, body string
		status             int
		code               api.Code
		field              string // the field the error names, as the body does
	}{
		{"PUT", "/v1/memory/items", `{"namespace": [], "key": "k", "value": 1}`, 422, api.CodeInvalidInput, ""},
		{"PUT", "/v1/memory/items", `{"namespace": ["a", ""], "key": "k", "value": 1}`, 422, api.CodeInvalidInput, ""},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k\u0000", "value": 1}`, 422, api.CodeInvalidInput, ""},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k"}`, 422, api.CodeInvalidInput, ""},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k", "value": 1, "ttl_seconds": -1}`, 422, api.CodeInvalidInput, ""},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k", "value": 1, "extra": 1}`, 400, api.CodeBadRequest, ""},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k", "value": 1, "index": "no"}`, 400, api.CodeBadRequest, "index"},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": 5, "value": 1}`, 400, api.CodeBadRequest, "key"},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k", "value": 1, "ttl_seconds": "1"}`, 400, api.CodeBadRequest, "ttl_seconds"},
		{"POST", "/v1/memory/items/search", `{"namespace_prefix": [1]}`, 400, api.CodeBadRequest, "namespace_prefix"},
		{"PUT", "/v1/memory/items", `{"namespace": ["a"], "key": "k", "value": "` + strings.Repeat("x", 1<<20) + `"}`, 422, api.CodeInvalidInput, ""},
		{"GET", "/v1/memory/items?key=k", ``, 422, api.CodeInvalidInput, ""},
		{"GET", "/v1/memory/items?namespace=a", ``, 422, api.CodeInvalidInput, ""},
		{"DELETE", "/v1/memory/items?namespace=a&key=", ``, 422, api.CodeInvalidInput, ""},
		{"POST", "/v1/memory/items/search", `{"limit": 5000}`, 422, api.CodeInvalidInput, ""},
		{"POST", "/v1/memory/items/search", `{"offset": -1}`, 422, api.CodeInvalidInput, ""},
		{"POST", "/v1/memory/namespaces", `{"prefix": ["a\nb"]}`, 422, api.CodeInvalidInput, ""},
	} {
		req, _ := http.NewRequest(c.method, h.base+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+h.acme.Key)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb api.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != c.status || eb.Error == nil || eb.Error.Code != c.code {
			t.Errorf("%s %s %.60s: %d %+v, want %d %s", c.method, c.path, c.body, resp.StatusCode, eb.Error, c.status, c.code)
			continue
		}
		if d, _ := eb.Error.Details.(map[string]any); c.field != "" && (d == nil || d["field"] != c.field || !strings.Contains(eb.Error.Message, fmt.Sprintf("field %q", c.field))) {
			t.Errorf("%s: %+v, want the field named %q", c.body, eb.Error, c.field)
		}
	}
}
