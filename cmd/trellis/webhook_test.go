package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
	"github.com/trellisflow/trellis/runtime/webhook"
)

// quickFlow takes a turn in one short step.
const quickFlow = `version: 1
name: quick
state:
  schema:
    type: object
    properties:
      said: {type: string, default: ""}
input: [said]
nodes:
  echo: {kind: set, set: {said: "input.said"}}
edges:
  - {from: START, to: echo}
  - {from: echo, to: END}
`

// hookReceiver is a webhook receiver on loopback that holds the first
// message of the path /hold open (never answering it), answers 503 to
// /down while down, and acknowledges the rest; it counts the messages it
// acknowledged, by webhook-id, and checks every signature.
type hookReceiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	held   chan struct{} // closed when the first /hold message arrives
	holdOK bool
	down   bool
	acked  map[string][]api.WebhookEvent
	seen   int
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := webhook.Verify(h.secret, r.Header, body, time.Minute, time.Now()); err != nil {
		h.t.Errorf("a message with no valid signature: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var ev api.WebhookEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		h.t.Errorf("a message that is not a run's end: %v", err)
	}
	h.mu.Lock()
	h.seen++
	if r.URL.Path == "/hold" && !h.holdOK {
		h.holdOK = true
		close(h.held)
		h.mu.Unlock()
		<-r.Context().Done() // its sender dies holding it
		return
	}
	if r.URL.Path == "/down" && h.down {
		h.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	id := r.Header.Get(webhook.HeaderID)
	h.acked[id] = append(h.acked[id], ev)
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// A server SIGKILLed while it posts a run's end (the receiver has the
// message and has not answered), and with another run's first attempt
// failed: a server started after it delivers both, each acknowledged
// once, signed, and the attempts read over the API say who tried what.
func TestWebhookSurvivesSIGKILL(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
			if backend == "postgres" {
				db = storetest.Postgres(t)
			}
			flows := t.TempDir()
			if err := os.WriteFile(filepath.Join(flows, "quick.yaml"), []byte(quickFlow), 0o644); err != nil {
				t.Fatal(err)
			}
			secretText := webhook.NewSecret()
			secret, _ := webhook.ParseSecret(secretText)
			t.Setenv(server.WebhookSecretEnv, secretText)
			recv := &hookReceiver{t: t, secret: secret, held: make(chan struct{}), down: true, acked: map[string][]api.WebhookEvent{}}
			rs := httptest.NewServer(recv)
			defer rs.Close()
			rt, err := facade.Open(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			cat, _ := store.CatalogOf(rt.Store())
			_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
			if err != nil {
				t.Fatal(err)
			}
			start := func() (*api.Client, func() string, func()) {
				addr := freeAddr(t)
				cmd, stderr := kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr,
					"--webhook-allow", "127.0.0.1", "--webhook-timeout", "4s", "--webhook-backoff", "300ms")
				c := api.NewClient("http://"+addr, key)
				waitReady(t, c)
				return c, stderr.String, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
			}
			a, aLog, killA := start()
			for _, id := range []string{"held", "failed"} {
				if _, err := a.CreateThread(ctx, api.CreateThread{ID: id, Flow: "quick"}); err != nil {
					t.Fatal(err)
				}
			}
			held, err := a.RunWait(ctx, "held", api.StartRun{Input: map[string]any{"said": "held"}, Webhook: rs.URL + "/hold"})
			if err != nil || held.Status != api.RunSucceeded {
				t.Fatalf("run: %+v %v", held, err)
			}
			select {
			case <-recv.held:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the first message did not come:\n%s", aLog())
			}
			failed, err := a.RunWait(ctx, "failed", api.StartRun{Input: map[string]any{"said": "failed"}, Webhook: rs.URL + "/down"})
			if err != nil || failed.Status != api.RunSucceeded {
				t.Fatalf("run: %+v %v", failed, err)
			}
			var first *api.Deliveries
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
				first, err = a.Deliveries(ctx, "failed", failed.ID)
				if err == nil && len(first.Deliveries) == 1 && len(first.Deliveries[0].Attempts) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no failed attempt: %+v %v\n%s", first, err, aLog())
				}
			}
			aID := first.Deliveries[0].Attempts[0].Server
			killA() // SIGKILL, with the held message unanswered
			recv.mu.Lock()
			recv.down = false
			recv.mu.Unlock()

			b, bLog, _ := start()
			deliveries := map[string]api.Delivery{}
			for deadline := time.Now().Add(3 * time.Minute); len(deliveries) < 2; time.Sleep(50 * time.Millisecond) {
				for thread, run := range map[string]string{"held": held.ID, "failed": failed.ID} {
					ds, err := b.Deliveries(ctx, thread, run)
					if err == nil && len(ds.Deliveries) == 1 && ds.Deliveries[0].Status == "delivered" {
						deliveries[run] = ds.Deliveries[0]
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("delivered %v after the kill:\n%s", deliveries, bLog())
				}
			}
			time.Sleep(500 * time.Millisecond) // time for a second message, were one sent
			recv.mu.Lock()
			defer recv.mu.Unlock()
			for run, d := range deliveries {
				got := recv.acked[d.ID]
				if len(got) != 1 || got[0].Data.ID != run || got[0].Type != "run.succeeded" {
					t.Errorf("run %s: acknowledged %d times: %+v", run, len(got), got)
				}
			}
			if len(recv.acked) != 2 {
				t.Errorf("acknowledged %d messages, want 2", len(recv.acked))
			}
			// the held run's attempt died with its server: its one recorded
			// attempt is the other server's
			if h := deliveries[held.ID]; len(h.Attempts) != 1 || h.Attempts[0].Server == aID || h.Attempts[0].Status != 204 {
				t.Errorf("the held run's attempts: %+v", h.Attempts)
			}
			if f := deliveries[failed.ID]; len(f.Attempts) != 2 || f.Attempts[0].Server != aID || f.Attempts[0].Status != 503 ||
				f.Attempts[1].Server == aID || f.Attempts[1].Status != 204 || !strings.Contains(f.Attempts[0].Error, "503") {
				t.Errorf("the failed run's attempts: %+v", f.Attempts)
			}
		})
	}
}
