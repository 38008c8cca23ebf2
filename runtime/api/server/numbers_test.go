package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/value"
)

// Integers in a request's JSON reach the state exactly: a run's input
// (kept on the run record and read back to run it) as well as a new
// thread's values, up to the ends of the 64-bit range and beyond 2^53,
// and the run's record shows them as sent; a number outside the range
// is refused.
func TestIntegersThroughTheAPI(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "num.yaml"), []byte(`version: 1
name: num
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      m: {type: integer, default: 0}
nodes:
  dec: {kind: assign, set: {m: "state.n - 1"}}
edges:
  - {from: START, to: dec}
  - {from: dec, to: END}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			rt, err := trellis.Open(ctx, storeAddr(t, b.name))
			if err != nil {
				t.Fatal(err)
			}
			srv, err := New(Config{Runtime: rt, FlowsDir: dir, Kinds: all.Registry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ctx, ln) }()
			defer func() { cancel(); <-served; rt.Close() }()
			_, key, err := CreateKey(ctx, srv.cat, "acme", "acme key", false)
			if err != nil {
				t.Fatal(err)
			}
			post := func(path, body string) (int, map[string]any) {
				t.Helper()
				req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				v, err := value.Decode(bytes.TrimSpace(raw))
				if err != nil {
					t.Fatalf("%s: %v: %s", path, err, raw)
				}
				return resp.StatusCode, v.(map[string]any)
			}
			if code, out := post("/v1/threads", `{"id": "t", "flow": "num", "values": {"m": 9223372036854775807}}`); code != 201 && code != 200 {
				t.Fatalf("create: %d %v", code, out)
			}
			for _, n := range []string{"9223372036854775807", "9007199254740993", "-9223372036854775807"} {
				code, out := post("/v1/threads/t/runs/wait", `{"input": {"n": `+n+`}}`)
				st, _ := out["state"].(map[string]any)
				in, _ := out["input"].(map[string]any)
				want, _ := value.Decode([]byte(n))
				if code != 200 || st["n"] != want || st["m"] != want.(int)-1 || in["n"] != want {
					t.Errorf("input %s: %d %v", n, code, out)
				}
			}
			if code, out := post("/v1/threads", `{"id": "u", "flow": "num"}`); code != 201 && code != 200 {
				t.Fatalf("create: %d %v", code, out)
			}
			for _, n := range []string{"9223372036854775808", "-9223372036854775809", "1e23"} {
				if code, out := post("/v1/threads/u/runs/wait", `{"input": {"n": `+n+`}}`); code != 422 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "64-bit integer range") {
					t.Errorf("input %s: %d %v", n, code, out)
				}
			}
			// a float that large may be a rounding of the integer meant
			for _, n := range []string{"9007199254740993.0", "1e17", "-9.2e18"} {
				if code, out := post("/v1/threads/u/runs/wait", `{"input": {"n": `+n+`}}`); code != 422 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "write the integer in full") {
					t.Errorf("input %s: %d %v", n, code, out)
				}
			}
			if code, out := post("/v1/threads", `{"id": "v", "flow": "num", "values": {"m": 9007199254740993.0}}`); code != 422 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "write the integer in full") {
				t.Errorf("values 2^53+1 as a float: %d %v", code, out)
			}
			if code, out := post("/v1/threads/u/runs/wait", `{"input": {"n": 9007199254740991.0}}`); code != 200 || out["state"].(map[string]any)["n"] != 9007199254740991 {
				t.Errorf("input 2^53-1 as a float: %d %v", code, out)
			}
		})
	}
}

// The Go client reads integers beyond 2^53 exactly wherever the API
// answers with values: a thread's state, a run's input and state, a
// stream's events, a checkpoint's writes, and an interrupt's question.
func TestClientReadsIntegersExactly(t *testing.T) {
	const big = 9007199254740993 // 2^53 + 1: a float64 rounds it
	rt := openRuntime(t, "memory")
	s := serve(t, rt, flowsWith(t, map[string]string{"num": `version: 1
name: num
input: [n]
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      m: {type: integer, default: 0}
      list: {type: array, items: {type: integer}, default: []}
  reducers: {list: append}
nodes:
  dec: {kind: assign, set: {m: "state.n - 1", list: "[state.n]"}}
edges:
  - {from: START, to: dec}
  - {from: dec, to: END}
`}), "")
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "num", Values: map[string]any{"m": big}}); err != nil {
		t.Fatal(err)
	}
	st, err := s.acme.State(ctx, "t", 0)
	if err != nil || st.Values["m"] != big {
		t.Fatalf("state: %#v %v", st.Values["m"], err)
	}
	run, err := s.acme.RunWait(ctx, "t", api.StartRun{Input: map[string]any{"n": big}})
	if err != nil || run.Input["n"] != big || run.State["n"] != big || run.State["m"] != big-1 {
		t.Fatalf("run: input %#v state %#v %v", run.Input["n"], run.State, err)
	}
	if l, _ := run.State["list"].([]any); len(l) != 1 || l[0] != big {
		t.Fatalf("run: list %#v", run.State["list"])
	}
	var updated bool
	for ev, err := range s.acme.StreamRun(ctx, "t", api.StartRun{Input: map[string]any{"n": big + 2}}) {
		if err != nil {
			t.Fatal(err)
		}
		// m is told by the node that wrote it (its state_update names
		// it), the list's item by the state_update's appended items
		if ev.Event.Type == "node_end" && ev.Event.Update["m"] != nil {
			updated = true
			if ev.Event.Update["m"] != big+1 {
				t.Fatalf("event: %#v", ev.Event.Update)
			}
		}
		if ev.Event.Type == "state_update" {
			if l, _ := ev.Event.Appended["list"].([]any); len(l) != 1 || l[0] != big+2 || !slices.Contains(ev.Event.Fields, "m") {
				t.Fatalf("state_update: %#v", ev.Event)
			}
		}
	}
	if !updated {
		t.Fatal("no node_end wrote m")
	}
	cps, err := s.acme.History(ctx, "t", nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, cp := range cps {
		for _, w := range cp.Writes {
			if w.Field == "m" && w.Value == big+1 {
				seen = true
			}
		}
	}
	if !seen {
		t.Fatalf("history: %+v", cps)
	}
}
