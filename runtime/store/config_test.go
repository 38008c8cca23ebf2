package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const configured = `version: 1
name: configured
config:
  model: {type: string, enum: [small, large], default: small}
  token: {type: string, secret: true}
  steps: {type: integer, minimum: 1, default: 10}
limits: {max_steps: "config.steps"}
state:
  schema:
    type: object
    properties:
      used: {type: string, default: ""}
      saw: {type: string, default: ""}
      n: {type: integer, default: 0}
nodes:
  first: {kind: set, set: {used: "config.model"}, interrupt_after: true}
  second: {kind: set, set: {saw: "config.model + ' ' + (config.token ?? 'no token')", n: "0"}}
  loop: {kind: set, set: {n: "state.n + 1"}}
edges:
  - {from: START, to: first}
  - {from: first, to: second}
  - {from: second, to: loop}
  - from: loop
    bound: 100
    branch:
      - {when: "state.n < 5", to: loop}
      - else: END
`

// A run's configuration: expressions read it; the values given are
// checked against their schemas (an unknown key gets a suggestion); the
// run records the values not marked secret with its input, so a resumed
// run has them again, while a secret value is in no checkpoint and a
// resume is given it again; a limit can come from it. On each store.
func TestRunConfiguration(t *testing.T) {
	ctx := context.Background()
	g, dl := flow.LoadSource("configured.yaml", []byte(configured), kindtest.Registry())
	if g == nil || len(dl) > 0 {
		t.Fatal(dl)
	}
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { st.Close() }() // the store opened last
			eng := engine.New(st)
			_, err = eng.Run(ctx, g, engine.Request{Thread: "t", Config: map[string]any{"modle": "large", "steps": 0}})
			var ie *engine.InputError
			if !errors.As(err, &ie) || ie.Suggestion != "model" || len(ie.More) != 1 || !strings.Contains(ie.More[0].Error(), "steps") {
				t.Fatalf("bad configuration: %v", err)
			}
			if _, err := st.Head(ctx, "t"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a refused configuration left a thread: %v", err)
			}
			res, err := eng.Run(ctx, g, engine.Request{Thread: "t", Config: map[string]any{"model": "large", "token": "s3cret"}})
			if err != nil || res.Interrupt == nil || res.State["used"] != "large" {
				t.Fatalf("first run: %+v %v", res, err)
			}
			// the store holds the model, never the token
			cps, err := st.History(ctx, "t", store.HistoryOptions{})
			if err != nil {
				t.Fatal(err)
			}
			recorded := false
			for _, cp := range cps {
				if cp.Source == store.SourceInput && cp.Config["model"] == "large" {
					recorded = true
				}
				if _, ok := cp.Config["token"]; ok {
					t.Fatalf("the secret is in checkpoint %d", cp.Seq)
				}
			}
			if !recorded {
				t.Fatalf("no input checkpoint records the configuration: %+v", cps)
			}
			// a store opened afresh still has it; the secret is gone
			if url != "memory" {
				st.Close()
				if st, err = store.Open(ctx, url); err != nil {
					t.Fatal(err)
				}
				eng = engine.New(st)
			}
			res, err = eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true})
			if err != nil || res.State["saw"] != "large no token" || res.State["n"] != 5 {
				t.Fatalf("resumed: %+v %v", res, err)
			}
			// a new run with a stricter limit, resumed with its secret
			// given again: the limit recorded with it holds
			if res, err = eng.Run(ctx, g, engine.Request{Thread: "t", Config: map[string]any{"steps": 3}}); err != nil || res.Interrupt == nil {
				t.Fatalf("third run: %+v %v", res, err)
			}
			_, err = eng.Run(ctx, g, engine.Request{Thread: "t", Resume: true, Config: map[string]any{"token": "s3cret"}})
			var le *engine.LimitError
			if !errors.As(err, &le) || le.Limit != 3 {
				t.Fatalf("limit from the configuration: %v", err)
			}
			head, _ := st.Head(ctx, "t")
			if head.Values["saw"] != "small s3cret" {
				t.Fatalf("the resumed run saw %v", head.Values["saw"])
			}
		})
	}
}
