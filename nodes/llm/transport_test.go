package llm_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

const summaryFlow = `version: 1
name: review
state:
  schema:
    type: object
    properties:
      feedback: {type: object, default: {score: 7}}
      summary: {type: string, default: ""}
nodes:
  summarise:
    kind: llm
    prompt: summary
    writes:
      summary: output
edges:
  - {from: START, to: summarise}
  - {from: summarise, to: END}
`

// barrier holds requests until size of them are in, then lets them all
// on: size calls at once, whatever the machine's speed.
type barrier struct {
	mu   sync.Mutex
	size int
	in   int
	open chan struct{}
}

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	ch := b.open
	if b.in++; b.in == b.size {
		close(b.open)
		b.open, b.in = make(chan struct{}), 0
	}
	b.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestConcurrentCallsKeepTheirConnections: a provider given no client
// keeps a connection per concurrent call to its model server, so that
// the calls after them dial nothing (with two kept per host, as
// http.DefaultTransport keeps, each round of eight calls dialled six).
// The dials are the server's count of new connections.
func TestConcurrentCallsKeepTheirConnections(t *testing.T) {
	const calls = 8
	var dials atomic.Int64
	b := &barrier{size: calls, open: make(chan struct{})}
	srv := llmtest.New()
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Minute) // against a hang only
		defer cancel()
		if err := b.wait(ctx); err != nil {
			http.Error(w, "the calls did not come at once", http.StatusGatewayTimeout)
			return
		}
		srv.ServeHTTP(w, r)
	}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(llm.CloseIdleConnections)
	t.Cleanup(ts.Close)
	p := &llm.Provider{BaseURL: ts.URL + "/v1", APIKey: srv.Key, Retries: -1}
	g := setupFlow(t, p, summaryFlow)
	round := func() int64 {
		before := dials.Load()
		var wg sync.WaitGroup
		errs := make(chan error, calls)
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := engine.New(memory.New()).Run(context.Background(), g, engine.Request{Thread: fmt.Sprint("t", i)})
				if s, _ := res.State["summary"].(string); err == nil && (s == "" || strings.HasPrefix(s, "no summary")) {
					err = fmt.Errorf("no summary: %v", res.State)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return dials.Load() - before
	}
	if n := round(); n != calls {
		t.Fatalf("the first round dialled %d connections, want %d", n, calls)
	}
	// a connection goes back to the pool just after its call returns: a
	// round may start before the last of the round before is back, so
	// the verdict is a round that dialled nothing
	var seen []int64
	for range 20 {
		n := round()
		if n == 0 {
			return
		}
		seen = append(seen, n)
	}
	t.Fatalf("every round of %d concurrent calls dialled new connections: %v", calls, seen)
}
