package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
)

// A 401 says how to authenticate (WWW-Authenticate: Bearer), and the
// scheme of an Authorization header is case-insensitive.
func TestBearerScheme(t *testing.T) {
	rt := openRuntime(t, "memory")
	s := serve(t, rt, stepFlows(t, 1), "")
	get := func(auth string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", s.base+"/v1/flows", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		if resp := get(scheme + " " + s.acme.Key); resp.StatusCode != 200 {
			t.Errorf("%s KEY: %d", scheme, resp.StatusCode)
		}
	}
	for _, c := range []struct{ auth, want string }{
		{"", `Bearer realm="trellis"`},
		{"Basic YWRhOmFkYQ==", `Bearer realm="trellis"`},
		{"Bearer trk_aaaaaaaaaaaa_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", `Bearer realm="trellis", error="invalid_token"`},
		{"bearer nonsense", `Bearer realm="trellis", error="invalid_token"`},
	} {
		resp := get(c.auth)
		if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != c.want {
			t.Errorf("%q: %d, WWW-Authenticate %q, want %q", c.auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), c.want)
		}
	}
}

// A client that leaves before its answer is its own outcome: counted as
// 499 (not 5xx) in the metrics and logged as a disconnect, not an error,
// whether it left while its key was being checked or while it waited on
// a run.
func TestDisconnectsAreNotServerErrors(t *testing.T) {
	rt := openRuntime(t, storeAddr(t, "sqlite"))
	// steps of 2 s: the run is still running when the client leaves
	s := serve(t, rt, stepFlows(t, 2000), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	// a client gone before the server reads the store
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for _, path := range []string{"/v1/threads", "/v1/threads/t/state"} {
		req := httptest.NewRequestWithContext(gone, "GET", path, nil)
		req.Header.Set("Authorization", "Bearer "+s.acme.Key)
		s.srv.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}
	// clients that stop waiting on a run: once the server has the wait
	// (the run it started is running), and once the join is sent (a
	// client that left before its request was even sent is not one the
	// server saw leave)
	wctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		for wctx.Err() == nil {
			if runs, err := s.acme.Runs(ctx, "t"); err == nil && len(runs) == 1 && runs[0].Status == api.RunRunning {
				stopWaiting()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := s.acme.RunWait(wctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the wait: %v", err)
	}
	runs, err := s.acme.Runs(ctx, "t")
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	jctx, stopJoining := context.WithCancel(ctx)
	defer stopJoining()
	jctx = httptrace.WithClientTrace(jctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { stopJoining() }})
	if _, err := s.acme.Join(jctx, "t", runs[0].ID); !errors.Is(err, context.Canceled) {
		t.Fatalf("the join: %v", err)
	}
	if _, err := s.acme.Join(ctx, "t", runs[0].ID); err != nil {
		t.Fatal(err)
	}
	var m map[string]float64
	eventually(t, 5*time.Second, "the disconnects counted", func() bool {
		m = scrapeURL(t, s.base)
		return m[`trellis_http_requests_total{route="POST /v1/threads/{id}/runs/wait",status="499"}`] == 1 &&
			m[`trellis_http_requests_total{route="GET /v1/threads/{id}/runs/{run}/wait",status="499"}`] == 1 &&
			m[`trellis_http_requests_total{route="GET /v1/threads",status="499"}`] == 1 &&
			m[`trellis_http_requests_total{route="GET /v1/threads/{id}/state",status="499"}`] == 1
	})
	for k, v := range m {
		if strings.HasPrefix(k, "trellis_http_requests_total{") && strings.Contains(k, `status="5`) {
			t.Errorf("%s %v", k, v)
		}
	}
	logs := s.log.String()
	if strings.Contains(logs, "level=ERROR") {
		t.Errorf("errors logged for clients that left:\n%s", logs)
	}
	if n := strings.Count(logs, `msg="client disconnected"`); n != 4 {
		t.Errorf("%d disconnects logged, want 4:\n%s", n, logs)
	}
}

// scrapeURL reads a server's metrics: name with labels, value.
func scrapeURL(t *testing.T, base string) map[string]float64 {
	t.Helper()
	return scrape(t, &harness{base: base, http: http.DefaultClient})
}

// The threads' metadata filter takes the style the document declares
// (deepObject, metadata[KEY]=VALUE), as standard clients send it, and a
// query parameter a route does not take is refused, not ignored.
func TestMetadataFilterAndUnknownParameters(t *testing.T) {
	rt := openRuntime(t, "memory")
	s := serve(t, rt, stepFlows(t, 1), "")
	for id, md := range map[string]map[string]string{"a": {"team": "red", "role": "lead"}, "b": {"team": "red"}, "c": {"team": "blue"}} {
		if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps", Metadata: md}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(rawQuery string) (int, []string, *api.Error) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.base+"/v1/threads?"+rawQuery, nil)
		req.Header.Set("Authorization", "Bearer "+s.acme.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			var eb api.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			return resp.StatusCode, nil, eb.Error
		}
		var out api.ThreadList
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, th := range out.Threads {
			ids = append(ids, th.ID)
		}
		slices.Sort(ids)
		return 200, ids, nil
	}
	for q, want := range map[string]string{
		"metadata[team]=red":                     "[a b]",
		"metadata%5Bteam%5D=blue":                "[c]",
		"metadata[team]=red&metadata[role]=lead": "[a]",
		"metadata[team]=green":                   "[]",
		"":                                       "[a b c]",
	} {
		if code, ids, e := list(q); code != 200 || fmt.Sprint(ids) != want {
			t.Errorf("%s: %d %v %v, want %s", q, code, ids, e, want)
		}
	}
	for q, param := range map[string]string{
		"metadata[]=red":    "metadata",
		"metadata[team=red": "metadata",
		"metadata=red":      "metadata",
		"metadata.team=red": "metadata.team",
		"colour=red":        "colour",
		"limit=5&Limit=6":   "Limit",
	} {
		code, _, e := list(q)
		if code != 400 || e == nil || !strings.Contains(e.Message, param) || parameterOf(e) != param {
			t.Errorf("%s: %d %v, want a 400 naming %s", q, code, e, param)
		}
	}
	// the Go client filters in the same style
	out, err := s.acme.Threads(ctx, api.ThreadQuery{Metadata: map[string]string{"team": "red", "role": "lead"}})
	if err != nil || len(out.Threads) != 1 || out.Threads[0].ID != "a" {
		t.Fatalf("the client's filter: %+v %v", out, err)
	}
}
