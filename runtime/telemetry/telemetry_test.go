package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/telemetry"
)

// Two nodes in parallel, then a third; second fails when n > 5.
const forked = `version: 1
name: forked
state:
  schema:
    type: object
    properties:
      a: {type: integer, default: 0}
      b: {type: integer, default: 0}
      n: {type: integer, default: 0}
      list: {type: array, items: {type: integer}, default: []}
input: [n]
nodes:
  first: {kind: assign, set: {a: "input.n + 1"}}
  second: {kind: assign, set: {b: "input.n > 5 ? state.list[input.n] : input.n * 2"}}
  third: {kind: assign, set: {a: "state.a + state.b"}}
edges:
  - {from: START, to: [first, second]}
  - {from: [first, second], to: third}
  - {from: third, to: END}
`

func load(t *testing.T) *trellis.Flow {
	t.Helper()
	f, err := trellis.LoadSource("forked.yaml", []byte(forked))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

func TestSpans(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rt, err := trellis.Open(ctx, "memory", trellis.WithTracer(telemetry.Tracer(tp.Tracer(telemetry.Name))))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	f := load(t)
	res, err := rt.Run(ctx, f, "t1", map[string]any{"n": 3})
	if err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want a run and three nodes", len(spans))
	}
	run := spans[len(spans)-1]
	if run.Name() != "run forked" || run.Parent().IsValid() {
		t.Fatalf("the last span is %q (parent %v), want the run's, a root", run.Name(), run.Parent())
	}
	want := map[string]string{"trellis.flow": "forked", "trellis.thread": "t1", "trellis.run": res.Run}
	for k, v := range want {
		if got := attrs(run)[k]; got != v {
			t.Errorf("run span %s = %q, want %q", k, got, v)
		}
	}
	var nodes []string
	for _, s := range spans[:3] {
		a := attrs(s)
		nodes = append(nodes, a["trellis.node"]+"@"+a["trellis.step"])
		if s.Parent().SpanID() != run.SpanContext().SpanID() || s.SpanContext().TraceID() != run.SpanContext().TraceID() {
			t.Errorf("node span %q is not the run's child", s.Name())
		}
		if a["trellis.kind"] != "assign" || a["trellis.attempts"] != "1" || a["trellis.flow"] != "forked" || a["trellis.thread"] != "t1" ||
			a["trellis.run"] != res.Run || s.Status().Code == codes.Error {
			t.Errorf("node span %q: %v %v", s.Name(), a, s.Status())
		}
	}
	slices.Sort(nodes)
	if !slices.Equal(nodes, []string{"first@1", "second@1", "third@2"}) {
		t.Errorf("node spans %v", nodes)
	}

	// a refused input: the run's span records the error
	if _, err := rt.Run(ctx, f, "t1", map[string]any{"m": 1}); err == nil {
		t.Fatal("an unknown input was accepted")
	}
	spans = rec.Ended()
	if last := spans[len(spans)-1]; last.Name() != "run forked" || last.Status().Code != codes.Error || len(last.Events()) == 0 {
		t.Errorf("the refused run's span: %q %v", last.Name(), last.Status())
	}
}

// A failing node's span has the error, and the run's does too.
func TestNodeErrorSpan(t *testing.T) {
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	rt, err := trellis.Open(ctx, "memory", trellis.WithTracer(telemetry.Tracer(tp.Tracer(telemetry.Name))))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	f := load(t)
	if _, err := rt.Run(ctx, f, "t1", map[string]any{"n": 7}); err == nil {
		t.Fatal("the run succeeded")
	}
	failed := 0
	for _, s := range rec.Ended() {
		if s.Status().Code == codes.Error {
			failed++
		}
	}
	if failed < 2 {
		t.Errorf("%d spans record the error, want a node's and the run's", failed)
	}
}

// receiver is an OTLP/HTTP trace receiver on loopback.
type receiver struct {
	mu    sync.Mutex
	spans []string
	attrs map[string]string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var in collector.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &in) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range in.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			r.attrs[kv.Key] = kv.Value.GetStringValue()
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, s.Name)
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func TestFromEnvExportsOverOTLP(t *testing.T) {
	ctx := context.Background()
	recv := &receiver{attrs: map[string]string{}}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "interviews")
	tr, shutdown, err := telemetry.FromEnv(ctx, "trellis")
	if err != nil || tr == nil {
		t.Fatalf("FromEnv: %v %v", tr, err)
	}
	rt, err := trellis.Open(ctx, "memory", trellis.WithTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if _, err := rt.Run(ctx, load(t), "t1", map[string]any{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	slices.Sort(recv.spans)
	if !slices.Equal(recv.spans, []string{"node first", "node second", "node third", "run forked"}) {
		t.Errorf("exported spans %v", recv.spans)
	}
	if recv.attrs["service.name"] != "interviews" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", recv.attrs["service.name"])
	}
}

func TestFromEnvWithoutEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, shutdown, err := telemetry.FromEnv(context.Background(), "trellis")
	if tr != nil || err != nil || shutdown(context.Background()) != nil {
		t.Fatalf("FromEnv without an endpoint: %v %v", tr, err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	if _, _, err := telemetry.FromEnv(context.Background(), "trellis"); err == nil {
		t.Fatal("an unknown protocol was accepted")
	}
}
