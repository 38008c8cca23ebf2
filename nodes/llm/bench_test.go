package llm_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// observed is a node's view with someone receiving its events, so the
// reply is streamed.
type observed struct {
	kind.State
	pieces int
}

func (o *observed) Observed() bool  { return true }
func (o *observed) Stream(s string) { o.pieces++ }

// BenchmarkInterviewQuestion runs the interview's question node, whose
// prompt renders the example candidate's resume, against the test model
// server on loopback: rendering, the request, the streamed reply and the
// writes, per op.
func BenchmarkInterviewQuestion(b *testing.B) {
	srv := llmtest.New()
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer llm.CloseIdleConnections()
	p := &llm.Provider{BaseURL: ts.URL + "/v1", APIKey: srv.Key}
	g, dl := flow.Load(filepath.Join("..", "..", "flows", "interview.yaml"), all.WithProvider(func() *llm.Provider { return p }))
	if dl.HasErrors() {
		b.Fatal(dl)
	}
	n, ok := g.Node("question")
	if !ok {
		b.Fatal("the interview has no question node")
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "flows", "examples", "candidate.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	st := map[string]any{}
	if err := yaml.Unmarshal(raw, &st); err != nil {
		b.Fatal(err)
	}
	st["next_question"] = map[string]any{"anchor": "a streaming log indexer", "aspect": "impact", "text": "What did indexing 2 TB a day take?"}
	st["questions_asked"] = []any{map[string]any{"text": "Tell me about the feature-flag service."}}
	st["previous_questions"] = []any{map[string]any{"text": "Why Go?"}}
	norm, err := value.Normalize(st)
	if err != nil {
		b.Fatal(err)
	}
	s := &observed{State: kind.View("question", g.Vars(norm.(map[string]any), map[string]any{}))}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		upd, err := n.Impl.Run(ctx, s)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := upd.Get("next_question"); !ok {
			b.Fatalf("the node wrote %v", upd)
		}
	}
	if s.pieces == 0 {
		b.Fatal("nothing was streamed")
	}
}
