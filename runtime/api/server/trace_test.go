package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/telemetry"
)

// withHeader adds a header to every request.
type withHeader struct{ name, value string }

func (h withHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// A run started by a traced caller (a W3C traceparent header) is a span
// of the caller's trace, and its nodes are spans of the run.
func TestRunSpanJoinsTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	rt, err := trellis.Open(ctx, "memory")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rt.Engine().Tracer = telemetry.Tracer(tp.Tracer(telemetry.Name))
	srv, err := New(Config{Runtime: rt, FlowsDir: flowsDir, Kinds: all.Offline(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	_, key, err := CreateKey(ctx, srv.cat, "acme", "", false)
	if err != nil {
		t.Fatal(err)
	}
	c := api.NewClient(hs.URL, key)
	c.HTTP = &http.Client{Transport: withHeader{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "greet"}); err != nil {
		t.Fatal(err)
	}
	run, err := c.RunWait(ctx, "t1", api.StartRun{Input: map[string]any{"name": "Ada"}})
	if err != nil || run.Status != api.RunSucceeded {
		t.Fatalf("run %+v %v", run, err)
	}
	var runSpan sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "run greet" {
			runSpan = s
		}
	}
	if runSpan == nil {
		t.Fatalf("no run span among %d", len(rec.Ended()))
	}
	if got := runSpan.SpanContext().TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the run's trace is %s, not the caller's", got)
	}
	if p := runSpan.Parent(); !p.IsRemote() || p.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("the run's parent is %v, not the caller's span", p)
	}
	nodes := 0
	for _, s := range rec.Ended() {
		if s.Parent().SpanID() == runSpan.SpanContext().SpanID() {
			nodes++
		}
	}
	if nodes == 0 {
		t.Error("no node span in the run's")
	}
}

// A run queued behind another (on_busy enqueue) and claimed later, by
// this server or another, or adopted from a server that died, is a span
// of the trace of the request that queued it: the record keeps the
// caller's traceparent.
func TestQueuedRunJoinsTheCallersTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	h := newHarness(t, "sqlite", slowGreeting(500*time.Millisecond))
	h.srv.cfg.Runtime.Engine().Tracer = telemetry.Tracer(tp.Tracer(telemetry.Name))
	interviewThread(t, h, "q1")
	first, err := h.acme.StartRun(ctx, "q1", api.StartRun{})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, h.acme, "q1", first.ID)
	_, key, err := CreateKey(ctx, h.srv.cat, "acme", "traced", false)
	if err != nil {
		t.Fatal(err)
	}
	c := api.NewClient(h.base, key)
	c.HTTP = &http.Client{Transport: withHeader{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	queued, err := c.StartRun(ctx, "q1", api.StartRun{Input: map[string]any{"last_response": "I build data pipelines."}, OnBusy: api.OnBusyEnqueue})
	if err != nil || queued.Status != api.RunQueued {
		t.Fatalf("enqueue: %+v %v", queued, err)
	}
	if done, err := h.acme.Join(ctx, "q1", queued.ID); err != nil || done.Status != api.RunSucceeded {
		t.Fatalf("the queued run: %+v %v", done, err)
	}
	runs := 0
	for _, s := range rec.Ended() {
		if s.Name() == "run interview" && s.SpanContext().TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
			runs++
			if p := s.Parent(); !p.IsRemote() || p.SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("the queued run's parent is %v, not the caller's span", p)
			}
		}
	}
	if runs != 1 {
		t.Errorf("%d runs in the caller's trace among %d spans, want the queued one", runs, len(rec.Ended()))
	}
}
