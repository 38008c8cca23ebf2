package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
)

var (
	fuzzOnce sync.Once
	fuzzSrv  *Server
	fuzzKey  string
)

// fuzzServer is one server over a memory store for the whole fuzz
// process, with thread "canary" whose state must survive every input.
func fuzzServer(t testing.TB) (*Server, string) {
	fuzzOnce.Do(func() {
		rt, err := trellis.Open(ctx, "memory")
		if err != nil {
			t.Fatal(err)
		}
		fuzzSrv, err = New(Config{Runtime: rt, FlowsDir: flowsDir, Kinds: all.Offline(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		_, fuzzKey, _ = CreateKey(ctx, fuzzSrv.cat, "acme", "", true)
		do(fuzzSrv, fuzzKey, "POST", "/v1/threads", `{"id": "canary", "flow": "greet"}`)
		do(fuzzSrv, fuzzKey, "POST", "/v1/threads/canary/runs/wait", `{"input": {"name": "Ada"}}`)
	})
	return fuzzSrv, fuzzKey
}

func do(s *Server, key, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w
}

// fuzzRoutes are the routes that take a body (POST, unless a method is
// given).
var fuzzRoutes = []string{
	"/v1/threads",
	"/v1/threads/canary/runs/wait",
	"/v1/threads/canary/fork",
	"/v1/threads/canary/update",
	"/v1/keys",
	"/v1/flows/validate",
	"/v1/threads/fz/runs/wait",
	"/v1/flows/greet/check",
	"/v1/studio/session",
	"PUT /v1/memory/items",
	"/v1/memory/items/search",
	"/v1/memory/namespaces",
}

// FuzzRequests sends arbitrary bodies to the routes that take one: the
// server never panics or answers 500, every error has the error shape
// and speaks plainly (see leaks), and the canary thread is unharmed.
func FuzzRequests(f *testing.F) {
	for _, seed := range []string{
		`{"flow": "greet", "id": "fz"}`, `{"input": {"name": "x"}}`, `{"at": 1, "id": "f2"}`,
		`{"as": "greet", "values": {"greeting": 3}}`, `{"tenant": "x", "admin": true}`,
		`{"flow": "greet", "values": {"greetings": 1e400}}`, `{"input": {"name": {"a": [1, 2]}}, "on_busy": "interrupt"}`,
		"version: 1\nname: x\n", `[]`, `null`, `{"flow": "greet", "metadata": {"a": 1}}`,
		`{"files": [{"path": "flows/examples/greet.yaml", "text": "version: 1\nname: greet\nnodes: {}\n"}]}`, `{"token": "trs_x"}`,
		`{"namespace": ["a", "b"], "key": "k", "value": {"text": "x"}, "ttl_seconds": 60}`, `{"namespace_prefix": ["a"], "query": "x y", "limit": 5}`,
		`{"prefix": [], "offset": 2}`,
	} {
		for i := range fuzzRoutes {
			f.Add(uint8(i), seed)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		s, key := fuzzServer(t)
		method, path, ok := strings.Cut(fuzzRoutes[int(route)%len(fuzzRoutes)], " ")
		if !ok {
			method, path = "POST", method
		}
		w := do(s, key, method, path, body)
		if w.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, w.Code, w.Body.String())
		}
		if w.Code >= 400 {
			var eb api.ErrorBody
			if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
				t.Fatalf("%s %s %q: %d without the error shape: %s", method, path, body, w.Code, w.Body.String())
			}
			details, _ := json.Marshal(eb.Error.Details)
			if leak := leakIn(eb.Error.Message+" "+string(details), body, nil); leak != "" {
				t.Fatalf("%s %s %q: %d shows %q: %s", method, path, body, w.Code, leak, w.Body.String())
			}
		}
		st := do(s, key, "GET", "/v1/threads/canary/state", "")
		var state api.State
		if st.Code != http.StatusOK || json.Unmarshal(st.Body.Bytes(), &state) != nil {
			t.Fatalf("the canary's state: %d %s", st.Code, st.Body.String())
		}
		if _, ok := state.Values["greetings"].(float64); !ok {
			t.Fatalf("the canary's state is harmed: %v", state.Values)
		}
	})
}
