package store_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const cachedFlow = `version: 1
name: cached
input: [topic]
state:
  schema:
    type: object
    properties:
      topic: {type: string, default: ""}
      answer: {type: string, default: ""}
nodes:
  research:
    kind: expensive
    cache: {key: "state.topic", ttl: TTL}
edges:
  - {from: START, to: research}
  - {from: research, to: END}
`

// A node's cache on each store: a second run with the same key replays
// the node's writes without running it (marked in its event), in another
// thread and after the store is closed and opened again; another key
// runs it; an expired entry runs it again.
func TestNodeCache(t *testing.T) {
	var calls atomic.Int32
	reg := kind.NewSet(kind.Spec{Name: "expensive", Summary: "Counts its runs.", New: func(b kind.Builder) kind.Node {
		b.Writes("answer", config.Value{})
		return kind.Func(func(_ context.Context, s kind.State) (kind.Update, error) {
			n := calls.Add(1)
			return kind.Update{{Field: "answer", Value: "about " + s.Get("topic").(string) + " #" + string(rune('0'+n))}}, nil
		})
	}})
	ctx := context.Background()
	var runWith func(t *testing.T, g *flow.Graph, st store.Store, thread, topic string) (string, bool)
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			calls.Store(0)
			g, dl := flow.LoadSource("cached.yaml", []byte(strings.Replace(cachedFlow, "TTL", "1h", 1)), reg)
			if g == nil {
				t.Fatal(dl)
			}
			// the same node kept for 10ms: expired by the next run
			brief, dl := flow.LoadSource("cached.yaml", []byte(strings.Replace(cachedFlow, "TTL", "10ms", 1)), reg)
			if brief == nil {
				t.Fatal(dl)
			}
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			run := func(st store.Store, thread, topic string) (string, bool) {
				t.Helper()
				return runWith(t, g, st, thread, topic)
			}
			runWith = func(t *testing.T, g *flow.Graph, st store.Store, thread, topic string) (string, bool) {
				t.Helper()
				cached := false
				res, err := engine.New(st).Run(ctx, g, engine.Request{Thread: thread, Input: map[string]any{"topic": topic},
					Observe: func(e engine.Event) {
						if e.Type == engine.NodeEnd && e.Node == "research" {
							cached = e.Cached
						}
					}})
				if err != nil {
					t.Fatal(err)
				}
				return res.State["answer"].(string), cached
			}
			if a, c := run(st, "t1", "go"); a != "about go #1" || c {
				t.Fatalf("first run: %q cached %v", a, c)
			}
			if a, c := run(st, "t2", "go"); a != "about go #1" || !c || calls.Load() != 1 {
				t.Fatalf("same key: %q cached %v, %d runs", a, c, calls.Load())
			}
			if a, c := run(st, "t3", "rust"); a != "about rust #2" || c {
				t.Fatalf("another key: %q cached %v", a, c)
			}
			if name != "memory" {
				// the cache outlives the process that filled it
				st.Close()
				if st, err = store.Open(ctx, url); err != nil {
					t.Fatal(err)
				}
				if a, c := run(st, "t4", "rust"); a != "about rust #2" || !c {
					t.Fatalf("after a restart: %q cached %v", a, c)
				}
			}
			if a, c := runWith(t, brief, st, "t5", "zig"); a != "about zig #3" || c {
				t.Fatalf("a new key: %q cached %v", a, c)
			}
			time.Sleep(20 * time.Millisecond)
			if a, c := runWith(t, brief, st, "t6", "zig"); a != "about zig #4" || c {
				t.Fatalf("expired: %q cached %v", a, c)
			}
			st.Close()
		})
	}
}
