package flows_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The peer workloads as YAML flows. Each invocation is a whole run on a
// fresh thread: input, supersteps, per-step validation of the changed
// fields, checkpoints in the in-memory store, and an event stream with no
// subscriber. Compare with the hand-written floor and the peers by running
// the same workloads in one session (see Makefile target bench).

func benchFlow(b *testing.B, path string, check func(map[string]any) bool) {
	g, dl := flow.Load(path, all.Registry())
	if g == nil {
		b.Fatal(dl)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := engine.New(memory.New()).Run(ctx, g, engine.Request{Thread: "t"})
		if err != nil {
			b.Fatal(err)
		}
		if !check(res.State) {
			b.Fatalf("wrong result %v", res.State)
		}
	}
}

func BenchmarkW1Linear(b *testing.B) {
	benchFlow(b, "bench/w1_linear.yaml", func(s map[string]any) bool {
		return s["counter"] == 10 && len(s["list"].([]any)) == 10
	})
}

func BenchmarkW2FanOut(b *testing.B) {
	benchFlow(b, "bench/w2_fanout.yaml", func(s map[string]any) bool {
		return s["iter"] == 5 && s["sum"] == 123
	})
}

func BenchmarkW3Loop1000(b *testing.B) {
	benchFlow(b, "bench/w3_loop.yaml", func(s map[string]any) bool { return s["counter"] == 1000 })
}

// BenchmarkInterviewTurn is the engine's share of a served interview
// turn: a new thread, its greeting and three answers, against the test
// model server on loopback answering at once, in the in-memory store. It
// reports the time per turn (the model's HTTP round trips included).
func BenchmarkInterviewTurn(b *testing.B) { benchInterview(b, false) }

// BenchmarkInterviewTurnEncoded is BenchmarkInterviewTurn with each event
// encoded as a server encodes it once for its store and its streams,
// reporting the bytes of the events per turn.
func BenchmarkInterviewTurnEncoded(b *testing.B) { benchInterview(b, true) }

func benchInterview(b *testing.B, encode bool) {
	ts := httptest.NewServer(llmtest.New())
	defer ts.Close()
	reg := all.WithProvider(func() *llm.Provider { return &llm.Provider{BaseURL: ts.URL + "/v1", APIKey: "sk-bench"} })
	g, dl := flow.Load("interview.yaml", reg)
	if g == nil {
		b.Fatal(dl)
	}
	values, err := schema.ReadFile("examples/candidate.yaml")
	if err != nil {
		b.Fatal(err)
	}
	answers := []string{"I build data pipelines in Go and PostgreSQL at Northwind.", "Backpressure was the hard part; we added bounded queues.", "We cut search latency tenfold."}
	eng := engine.New(memory.New())
	ctx := context.Background()
	var eventBytes int
	observe := func(engine.Event) {}
	if encode {
		observe = func(ev engine.Event) {
			data, err := json.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			eventBytes += len(data)
		}
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		thread := "t" + strconv.Itoa(n)
		n++
		if _, err := eng.Create(ctx, g, thread, values.(map[string]any)); err != nil {
			b.Fatal(err)
		}
		for i := range len(answers) + 1 {
			in := map[string]any{}
			if i > 0 {
				in["last_response"] = answers[i-1]
			}
			if _, err := eng.Run(ctx, g, engine.Request{Thread: thread, Input: in, Observe: observe}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(len(answers)+1)), "ns/turn")
	if encode {
		b.ReportMetric(float64(eventBytes)/float64(b.N*(len(answers)+1)), "event-B/turn")
	}
}
