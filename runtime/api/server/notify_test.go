package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// Two servers share one PostgreSQL database through PgBouncer in
// transaction mode and hear each other's notifications on a direct
// connection. They poll the store only once an hour, so every step
// below that crosses servers is carried by a notification: a stream on
// one server follows a run on the other to its end, a run enqueued on
// one behind the other's starts when that one ends, and a cancel sent to
// one stops the run on the other.
func TestServersNotifyEachOther(t *testing.T) {
	pooled, direct := storetest.PooledPostgres(t)
	// the greeting takes a second; a turn that mentions channels, two
	model := llmtest.New(append(slowGreeting(time.Second),
		llmtest.Rule{Match: "Channels.", Replies: []llmtest.Reply{{Content: "Tell me more.", Delay: 2 * time.Second}}})...)
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	reg := all.WithProvider(func() *llm.Provider {
		return &llm.Provider{BaseURL: ms.URL + "/v1", APIKey: "sk-test", Backoff: time.Millisecond, Retries: 1}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var clients []*api.Client
	for i := range 2 {
		rt, err := trellis.Open(ctx, pooled)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(Config{Runtime: rt, FlowsDir: flowsDir, Kinds: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			NotifyURL: direct, PollEvery: time.Hour, StopTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- srv.Serve(sctx, ln) }()
		t.Cleanup(func() {
			stop()
			<-served
			rt.Close()
		})
		var key string
		if i == 0 {
			_, key, err = CreateKey(ctx, srv.cat, "acme", "", false)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, api.NewClient("http://"+ln.Addr().String(), key))
		} else {
			clients = append(clients, api.NewClient("http://"+ln.Addr().String(), clients[0].Key))
		}
		// wait until the server hears notifications
		for !srv.notes.heard.Load() {
			select {
			case <-ctx.Done():
				t.Fatal("the server never listened")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	a, b := clients[0], clients[1]
	cand := values(t, flowsDir+"/examples/candidate.yaml")
	if _, err := a.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "interview", Values: cand}); err != nil {
		t.Fatal(err)
	}

	// a run on A, streamed from B, and a run enqueued on B behind it
	run, err := a.StartRun(ctx, "t1", api.StartRun{})
	if err != nil {
		t.Fatal(err)
	}
	next, err := b.StartRun(ctx, "t1", api.StartRun{OnBusy: api.OnBusyEnqueue, Input: map[string]any{"last_response": "Go, mostly."}})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for ev, err := range b.JoinStream(ctx, "t1", run.ID, "") {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, string(ev.Event.Type))
	}
	if len(types) < 2 || types[0] != "run_start" || types[len(types)-1] != "run_end" {
		t.Fatalf("B streamed %v from A's run", types)
	}
	done, err := b.Join(ctx, "t1", next.ID)
	if err != nil || done.Status != api.RunSucceeded {
		t.Fatalf("the enqueued run: %+v %v", done, err)
	}

	// a run on B cancelled through A
	run, err = b.StartRun(ctx, "t1", api.StartRun{Input: map[string]any{"last_response": "Channels."}})
	if err != nil {
		t.Fatal(err)
	}
	waitRunning(t, a, "t1", run.ID)
	got, err := a.Cancel(ctx, "t1", run.ID)
	if err != nil || got.Status != api.RunCancelled {
		t.Fatalf("cancel through the other server: %+v %v", got, err)
	}
}
