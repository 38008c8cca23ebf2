package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
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

// busyReceiver holds every message to /busy open while busy (its sender
// waits for an answer), and acknowledges the rest, checking each
// signature and counting the messages it acknowledged by webhook-id.
type busyReceiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	held   int
	acked  map[string]int
}

func (h *busyReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := webhook.Verify(h.secret, r.Header, body, time.Minute, time.Now()); err != nil {
		h.t.Errorf("a message with no valid signature: %v", err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	if r.URL.Path == "/busy" {
		h.held++
		h.mu.Unlock()
		<-r.Context().Done() // its sender dies holding it
		return
	}
	h.acked[r.Header.Get(webhook.HeaderID)]++
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *busyReceiver) counts(id string) (held, acked int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.acked[id]
}

// A server SIGKILLed after a run's end and before any attempt to post
// it (its senders are all busy with messages a receiver holds open) has
// the delivery queued already: the run's end and its delivery falling
// due are one change in the store (a delivery is recorded as its run is
// queued, and is due once its run has ended). A server started after it
// delivers the run's end, once, signed; the first server never tried.
func TestWebhookQueuedWithTheRunsEnd(t *testing.T) {
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
			recv := &busyReceiver{t: t, secret: secret, acked: map[string]int{}}
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
					"--webhook-allow", "127.0.0.1", "--webhook-timeout", "20s", "--webhook-backoff", "300ms")
				c := api.NewClient("http://"+addr, key)
				waitReady(t, c)
				return c, stderr.String, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
			}
			a, aLog, killA := start()
			run := func(c *api.Client, thread, hook string) *api.Run {
				t.Helper()
				if _, err := c.CreateThread(ctx, api.CreateThread{ID: thread, Flow: "quick"}); err != nil {
					t.Fatal(err)
				}
				r, err := c.RunWait(ctx, thread, api.StartRun{Input: map[string]any{"said": thread}, Webhook: rs.URL + hook})
				if err != nil || r.Status != api.RunSucceeded {
					t.Fatalf("run on %s: %+v %v", thread, r, err)
				}
				return r
			}
			// the server's four senders each hold a message the receiver
			// does not answer
			const senders = 4
			for i := range senders {
				run(a, "busy-"+strconv.Itoa(i), "/busy")
			}
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
				if held, _ := recv.counts(""); held == senders {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the senders are not all busy:\n%s", aLog())
				}
			}
			ended := run(a, "ended", "/ok")
			// the run has ended; its delivery is queued, and not tried
			time.Sleep(300 * time.Millisecond)
			ds, err := a.Deliveries(ctx, "ended", ended.ID)
			if err != nil || len(ds.Deliveries) != 1 || ds.Deliveries[0].Status != "pending" || len(ds.Deliveries[0].Attempts) != 0 {
				t.Fatalf("the ended run's delivery before the kill: %+v %v", ds, err)
			}
			id := ds.Deliveries[0].ID
			if _, acked := recv.counts(id); acked != 0 {
				t.Fatalf("the ended run's end was posted before the kill")
			}
			killA()

			b, bLog, _ := start()
			var d api.Delivery
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
				ds, err := b.Deliveries(ctx, "ended", ended.ID)
				if err == nil && len(ds.Deliveries) == 1 && ds.Deliveries[0].Status == "delivered" {
					d = ds.Deliveries[0]
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the ended run's end was not delivered after the kill: %+v %v\n%s", ds, err, bLog())
				}
			}
			time.Sleep(500 * time.Millisecond) // time for a second message, were one sent
			if _, acked := recv.counts(id); acked != 1 {
				t.Errorf("the ended run's end acknowledged %d times, want 1", acked)
			}
			if len(d.Attempts) != 1 || d.Attempts[0].Status != 204 {
				t.Errorf("the ended run's attempts: %+v", d.Attempts)
			}
		})
	}
}
