package voice_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/cmd/trellis/internal/voice/voicetest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/schemas"
)

// grantReached is how the routes a grant reaches answer an agent's grant
// here: the body sent, and the status.
var grantReached = map[string]struct {
	body   string
	status int
}{
	"GET /v1/flows/{name}":                   {"", 200},
	"GET /v1/threads/{id}":                   {"", 200},
	"GET /v1/threads/{id}/state":             {"", 200},
	"POST /v1/threads/{id}/runs":             {`{"input": {"last_response": "I build things."}, "on_busy": "enqueue"}`, 202},
	"POST /v1/threads/{id}/runs/wait":        {`{"input": {"last_response": "I test things."}, "on_busy": "enqueue"}`, 200},
	"POST /v1/threads/{id}/runs/stream":      {`{"input": {"last_response": "I ship things."}, "on_busy": "enqueue"}`, 200},
	"GET /v1/threads/{id}/runs":              {"", 200},
	"GET /v1/threads/{id}/runs/{run}":        {"", 200},
	"GET /v1/threads/{id}/runs/{run}/wait":   {"", 200},
	"GET /v1/threads/{id}/runs/{run}/stream": {"", 200},
	"POST /v1/audio/speech":                  {`{"input": "Hello."}`, 200},
	"POST /v1/audio/transcriptions":          {`{}`, 415}, // reached: it takes a form
	"POST /v1/threads/{id}/voice/grant":      {"", 200},
	"DELETE /v1/threads/{id}/voice/grant":    {"", 204},
}

// TestGrantMatrix calls every route of the API (as schemas/openapi.yaml
// lists them; a test of the server keeps it equal to the route table) with
// the grant a real voice session's agent was handed: the routes marked
// x-grant answer, on its own thread; every other route, and its own
// routes on another thread, answer 403 forbidden.
func TestGrantMatrix(t *testing.T) {
	r := newRig(t)
	ctx := voicetest.Context(t, 2*time.Minute)
	r.interview(ctx, "other", 3)
	c, grant := r.opened("matrix")
	run, err := c.RunWait(ctx, "matrix", api.StartRun{OnBusy: api.OnBusyEnqueue})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var routes []string
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			m, ok := op.(map[string]any)
			if !ok {
				continue // parameters
			}
			if sec, ok := m["security"].([]any); ok && len(sec) == 0 {
				continue // public
			}
			pattern := strings.ToUpper(method) + " " + path
			routes = append(routes, pattern)
			documented[pattern] = m["x-grant"] == true
		}
	}
	// giving the grant up comes last
	slices.SortFunc(routes, func(a, b string) int {
		return strings.Compare(strings.Replace(a, "DELETE /v1/threads/{id}/voice/grant", "~", 1), strings.Replace(b, "DELETE /v1/threads/{id}/voice/grant", "~", 1))
	})
	if len(routes) < 30 {
		t.Fatalf("only %d routes found in schemas/openapi.yaml", len(routes))
	}
	for _, pattern := range slices.Sorted(maps.Keys(grantReached)) {
		if !documented[pattern] {
			t.Errorf("%s: the test takes it as reached by a grant, schemas/openapi.yaml does not", pattern)
		}
	}
	for _, thread := range []string{"other", "matrix"} {
		for _, pattern := range routes {
			method, path, _ := strings.Cut(pattern, " ")
			want, reached := grantReached[pattern]
			if documented[pattern] != reached {
				t.Errorf("%s: x-grant %v in schemas/openapi.yaml, reached in this test %v", pattern, documented[pattern], reached)
				continue
			}
			if !reached || thread == "other" && strings.Contains(path, "{id}") {
				want.status = 403
			}
			path = strings.NewReplacer("{id}", thread, "{run}", run.ID, "{name}", "interview", "{key}", "nokey").Replace(path)
			if status, code := r.call(grant, method, path, want.body); status != want.status {
				t.Errorf("%s %s with the grant of thread matrix: %d %s, want %d", method, path, status, code, want.status)
			}
		}
	}
	if status, _ := r.call(grant, "GET", "/v1/threads/matrix/state", ""); status != 401 {
		t.Errorf("the grant given up: %d", status)
	}
}
