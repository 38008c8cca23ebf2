package server

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
)

// authCase is how the authorization matrix calls one route: the body it
// sends and the status the thread's owner (or, on admin routes, an admin)
// gets.
type authCase struct {
	body, ctype string
	ok          int
	// query goes after the path; owned marks a route reaching a record
	// of the owner's tenant that the path does not name (a memory
	// document): another tenant does not find it
	query string
	owned bool
}

// authCases covers every route of the table; a route without a case fails
// the matrix, so a new route cannot be forgotten.
var authCases = map[string]authCase{
	"GET /healthz":      {ok: 200},
	"GET /readyz":       {ok: 200},
	"GET /metrics":      {ok: 200},
	"GET /openapi.yaml": {ok: 200},

	"GET /v1/flows":              {ok: 200},
	"GET /v1/flows/{name}":       {ok: 200},
	"GET /v1/flows/{name}/graph": {ok: 200},
	"POST /v1/flows/validate":    {ok: 200, ctype: "application/yaml", body: "FLOW"},
	"POST /v1/flows/reload":      {ok: 200},

	// greet's versions, and the threads on the one loaded; a thread
	// moved onto the version it is on
	"GET /v1/flows/{name}/versions":                    {ok: 200},
	"GET /v1/flows/{name}/versions/{version}/threads":  {ok: 200},
	"POST /v1/flows/{name}/versions/{version}/promote": {ok: 200},
	"POST /v1/threads/{id}/migrate":                    {ok: 200, body: `{"to": "{version}"}`},

	// the studio's: greet's files, checked as they are; a save with no
	// edit (refused, and the repository's flows are never written); greet
	// has no node with a prompt; no token is valid
	"GET /v1/flows/{name}/files":               {ok: 200},
	"PUT /v1/flows/{name}/files":               {ok: 422, body: `{"files": []}`},
	"POST /v1/flows/{name}/check":              {ok: 200, body: `{"files": []}`},
	"GET /v1/flows/{name}/nodes/{node}/prompt": {ok: 422},
	"GET /studio":                              {ok: 200},
	"GET /studio/app.js":                       {ok: 200},
	"GET /studio/flow.schema.json":             {ok: 200},
	"POST /v1/studio/session":                  {ok: 401, body: `{"token": "trs_nothing"}`},
	"POST /studio/signin":                      {ok: 401, ctype: "application/x-www-form-urlencoded", body: "token=trs_nothing"},

	"POST /v1/threads":                        {ok: 201, body: `{"flow": "greet"}`},
	"GET /v1/threads":                         {ok: 200},
	"GET /v1/threads/{id}":                    {ok: 200},
	"DELETE /v1/threads/{id}":                 {ok: 204},
	"GET /v1/threads/{id}/state":              {ok: 200},
	"GET /v1/threads/{id}/history":            {ok: 200},
	"POST /v1/threads/{id}/fork":              {ok: 201, body: `{"at": 1}`},
	"POST /v1/threads/{id}/update":            {ok: 200, body: `{"as": "greet", "values": {"greeting": "hi"}}`},
	"POST /v1/threads/{id}/replay":            {ok: 201, body: `{"at": 1}`},
	"POST /v1/threads/{id}/flow-test":         {ok: 200, body: `{}`},
	"GET /v1/studio/session":                  {ok: 200},
	"POST /v1/studio/session/renew":           {ok: 200},
	"POST /v1/threads/{id}/runs":              {ok: 202, body: `{"input": {"name": "Ada"}}`},
	"POST /v1/threads/{id}/runs/wait":         {ok: 200, body: `{"input": {"name": "Ada"}}`},
	"POST /v1/threads/{id}/runs/stream":       {ok: 200, body: `{"input": {"name": "Ada"}}`},
	"GET /v1/threads/{id}/runs":               {ok: 200},
	"GET /v1/threads/{id}/runs/{run}":         {ok: 200},
	"GET /v1/threads/{id}/runs/{run}/wait":    {ok: 200},
	"GET /v1/threads/{id}/runs/{run}/stream":  {ok: 200},
	"POST /v1/threads/{id}/runs/{run}/cancel": {ok: 200},

	// the matrix's server has no LiveKit server (503); its speech routes
	// take something to say, and a multipart form to transcribe
	"POST /v1/threads/{id}/voice":         {ok: 503},
	"DELETE /v1/threads/{id}/voice":       {ok: 503},
	"POST /v1/threads/{id}/voice/grant":   {ok: 200},
	"DELETE /v1/threads/{id}/voice/grant": {ok: 204},
	"POST /v1/voice/signing-key":          {ok: 200},
	"POST /v1/audio/speech":               {ok: 422, body: `{"input": " "}`},
	"POST /v1/audio/transcriptions":       {ok: 415, body: `{}`},
	"GET /voice":                          {ok: 200},
	"GET /voice/app.js":                   {ok: 200},

	// acme's document, which another tenant does not find
	"PUT /v1/memory/items":         {ok: 200, body: `{"namespace": ["candidates", "ada"], "key": "k", "value": {"text": "x"}}`},
	"GET /v1/memory/items":         {ok: 200, query: "?namespace=candidates&namespace=ada&key={doc}", owned: true},
	"DELETE /v1/memory/items":      {ok: 204, query: "?namespace=candidates&namespace=ada&key={doc}", owned: true},
	"POST /v1/memory/items/search": {ok: 200, body: `{"namespace_prefix": ["candidates"], "query": "x"}`},
	"POST /v1/memory/namespaces":   {ok: 200, body: `{"prefix": ["candidates"]}`},

	// a run's webhook deliveries (none); acme's schedule, which another
	// tenant does not find
	"GET /v1/threads/{id}/runs/{run}/webhooks": {ok: 200},
	"POST /v1/schedules":                       {ok: 201, body: `{"flow": "greet", "cron": "0 3 * * *", "input": {"name": "Ada"}}`},
	"GET /v1/schedules":                        {ok: 200},
	"GET /v1/schedules/{schedule}":             {ok: 200, owned: true},
	"DELETE /v1/schedules/{schedule}":          {ok: 204, owned: true},
	"POST /v1/schedules/{schedule}/pause":      {ok: 200, owned: true},
	"POST /v1/schedules/{schedule}/resume":     {ok: 200, owned: true},
	"GET /v1/schedules/{schedule}/ticks":       {ok: 200, owned: true},

	// acme's eval of greet's dataset, which another tenant does not find
	// (the owner deletes it, once it has ended)
	"GET /v1/evals/datasets":  {ok: 200},
	"POST /v1/evals":          {ok: 202, body: `{"dataset": "examples/greet.eval.yaml"}`},
	"GET /v1/evals":           {ok: 200},
	"GET /v1/evals/{eval}":    {ok: 200, owned: true},
	"DELETE /v1/evals/{eval}": {ok: 204, owned: true},

	"POST /v1/keys":         {ok: 201, body: `{"tenant": "newco"}`},
	"GET /v1/keys":          {ok: 200},
	"DELETE /v1/keys/{key}": {ok: 204},
}

// TestAuthorizationMatrix calls every route as each kind of caller: with
// no key, with a key or a grant that is not valid, as another tenant, as
// the owner of the thread it names, as an admin of another tenant, and
// with a voice agent's grant for the thread it names and for another
// thread of its owner.
func TestAuthorizationMatrix(t *testing.T) {
	// every caller creates schedules of acme's: more than a tenant may keep by default
	h := newHarness(t, "memory", nil, func(c *Config) { c.Speech, c.Page, c.Schedules.PerTenant = smallSpeech{}, smallPage("voice"), -1 })
	greet := readFile(t, flowsDir+"/examples/greet.yaml")
	callers := []struct {
		name string
		key  string
	}{
		{"none", ""},
		{"bad", "trk_aaaaaaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		{"bad grant", "trv_e30.AAAA"},
		{"other", h.globex.Key},
		{"owner", h.acme.Key},
		{"admin", h.admin.Key},
		{"grant", ""},
		{"grant of another thread", ""},
	}
	n := 0
	for _, rt := range h.srv.routes() {
		pattern := rt.method + " " + rt.path
		tc, ok := authCases[pattern]
		if !ok {
			t.Errorf("route %s has no case in the authorization matrix", pattern)
			continue
		}
		for _, c := range callers {
			// a thread of acme's with one finished run, and a key to revoke
			n++
			thread := "m" + strconv.Itoa(n)
			interviewless(t, h, thread)
			run, err := h.acme.RunWait(ctx, thread, api.StartRun{Input: map[string]any{"name": "Grace"}})
			if err != nil {
				t.Fatal(err)
			}
			victim, _, err := CreateKey(ctx, h.srv.cat, "acme", "victim", false)
			if err != nil {
				t.Fatal(err)
			}
			doc := "d" + strconv.Itoa(n)
			if _, err := h.acme.PutMemory(ctx, api.PutMemory{Namespace: []string{"candidates", "ada"}, Key: doc, Value: []byte(`{"text": "x"}`)}); err != nil {
				t.Fatal(err)
			}
			sched := "s" + strconv.Itoa(n)
			if _, err := h.acme.CreateSchedule(ctx, api.CreateSchedule{ID: sched, Flow: "greet", Cron: "0 3 * * *", Input: map[string]any{"name": "Grace"}}); err != nil {
				t.Fatal(err)
			}
			key := c.key
			switch c.name {
			case "grant":
				key = grantFor(t, h, h.acme, thread)
			case "grant of another thread":
				interviewless(t, h, "o"+strconv.Itoa(n))
				key = grantFor(t, h, h.acme, "o"+strconv.Itoa(n))
			}
			greetLoaded, err := h.srv.flows.get("greet")
			if err != nil {
				t.Fatal(err)
			}
			ev, err := h.acme.StartEval(ctx, api.StartEval{Dataset: "examples/greet.eval.yaml"})
			if err == nil {
				_, err = h.acme.WaitEval(ctx, ev.ID, 10*time.Millisecond)
			}
			if err != nil {
				t.Fatal(err)
			}
			path := strings.NewReplacer("{id}", thread, "{run}", run.ID, "{name}", "greet", "{node}", "greet", "{key}", victim.ID, "{schedule}", sched, "{eval}", ev.ID,
				"{version}", greetLoaded.version).Replace(rt.path)
			body := strings.ReplaceAll(tc.body, "{version}", greetLoaded.version)
			if body == "FLOW" {
				body = greet
			}
			req, _ := http.NewRequest(rt.method, h.base+path+strings.ReplaceAll(tc.query, "{doc}", doc), strings.NewReader(body))
			if body != "" {
				ctype := tc.ctype
				if ctype == "" {
					ctype = "application/json"
				}
				req.Header.Set("Content-Type", ctype)
			}
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := h.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := expected(rt, tc, c.name)
			if resp.StatusCode != want {
				t.Errorf("%s as %s: %d, want %d", pattern, c.name, resp.StatusCode, want)
			}
		}
	}
}

// expected is the documented status of a route for a caller. A grant
// reaches the routes of grantReach, on its own thread; the routes of
// access agent take only a grant.
func expected(rt route, tc authCase, caller string) int {
	switch {
	case rt.access == public:
		return tc.ok
	case caller == "none" || caller == "bad" || caller == "bad grant":
		return http.StatusUnauthorized
	case strings.HasPrefix(caller, "grant"):
		if !grantReach[rt.method+" "+rt.path] || caller != "grant" && strings.Contains(rt.path, "{id}") {
			return http.StatusForbidden
		}
		return tc.ok
	case rt.access == agent:
		return http.StatusForbidden
	case (rt.access == admin || rt.access == edit) && caller != "admin":
		return http.StatusForbidden
	case rt.access == admin:
		return tc.ok
	case (strings.Contains(rt.path, "{id}") || tc.owned) && caller != "owner":
		// another tenant's thread (or document) is not found, like one
		// that does not exist
		return http.StatusNotFound
	}
	return tc.ok
}

func interviewless(t *testing.T, h *harness, id string) {
	t.Helper()
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "greet"}); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
