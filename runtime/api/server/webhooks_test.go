package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/egress/egresstest"
	"github.com/trellisflow/trellis/runtime/webhook"
)

// receiver is a webhook receiver on loopback: it checks each message's
// signature and answers with the statuses given in turn (then 204).
type receiver struct {
	t      *testing.T
	secret []byte
	srv    *httptest.Server
	mu     sync.Mutex
	got    []receivedHook
	answer []int
}

type receivedHook struct {
	id     string
	status int
	event  api.WebhookEvent
	valid  bool
}

func newReceiver(t *testing.T, secret []byte, answers ...int) *receiver {
	r := &receiver{t: t, secret: secret, answer: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h := receivedHook{id: req.Header.Get(webhook.HeaderID), valid: webhook.Verify(r.secret, req.Header, body, time.Minute, time.Now()) == nil}
		if err := json.Unmarshal(body, &h.event); err != nil {
			t.Errorf("receiver: %v: %s", err, body)
		}
		r.mu.Lock()
		h.status = http.StatusNoContent
		if len(r.answer) > 0 {
			h.status, r.answer = r.answer[0], r.answer[1:]
		}
		r.got = append(r.got, h)
		r.mu.Unlock()
		w.WriteHeader(h.status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) received() []receivedHook {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedHook(nil), r.got...)
}

func hookConfig(t *testing.T, allow ...string) (*WebhookConfig, []byte) {
	secret, err := webhook.ParseSecret(webhook.NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	list, err := egress.Parse(allow)
	if err != nil {
		t.Fatal(err)
	}
	return &WebhookConfig{Allow: list, Secret: secret, Backoff: 100 * time.Millisecond, Timeout: 5 * time.Second}, secret
}

// A run's end is posted to its webhook, signed; a receiver's 500 has it
// tried again after the backoff, and the attempts are read over the API.
// A flow's webhook set by the server goes to the runs that name none.
func TestWebhookDeliveredSignedAndRetried(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			cfg, secret := hookConfig(t, "127.0.0.1")
			recv := newReceiver(t, secret, http.StatusInternalServerError)
			flowHook := newReceiver(t, secret)
			cfg.Flows = map[string]string{"steps": flowHook.srv.URL + "/flow"}
			s := serve(t, openRuntime(t, storeAddr(t, b.name)), stepFlows(t, 1), "", func(c *Config) { c.Webhooks = cfg })
			if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			run, err := s.acme.RunWait(ctx, "t1", api.StartRun{Input: map[string]any{"said": "hi"}, Webhook: recv.srv.URL + "/hook"})
			if err != nil || run.Status != api.RunSucceeded {
				t.Fatalf("run: %+v %v", run, err)
			}
			var ds *api.Deliveries
			eventually(t, 20*time.Second, "the delivery", func() bool {
				ds, err = s.acme.Deliveries(ctx, "t1", run.ID)
				return err == nil && len(ds.Deliveries) == 1 && ds.Deliveries[0].Status == "delivered"
			})
			d := ds.Deliveries[0]
			if d.URL != recv.srv.URL+"/hook" || d.Run != run.ID || len(d.Attempts) != 2 || d.Attempts[0].Status != 500 || d.Attempts[0].Error == "" ||
				d.Attempts[1].Status != 204 || d.Attempts[1].Error != "" || d.Attempts[0].Server != s.srv.ID() || d.Next != nil {
				t.Fatalf("delivery: %+v", d)
			}
			if gap := d.Attempts[1].At.Sub(d.Attempts[0].At); gap < 80*time.Millisecond {
				t.Fatalf("tried again %v after the first attempt, before the backoff", gap)
			}
			got := recv.received()
			if len(got) != 2 {
				t.Fatalf("received %d messages", len(got))
			}
			for _, h := range got {
				if !h.valid || h.id != d.ID || h.event.Type != "run.succeeded" || h.event.Data.ID != run.ID || h.event.Data.Status != api.RunSucceeded ||
					h.event.Data.Thread != "t1" || h.event.Data.Input["said"] != "hi" {
					t.Fatalf("message: %+v", h)
				}
			}
			// the flow's webhook, for a run that names none
			run2, err := s.acme.RunWait(ctx, "t1", api.StartRun{Input: map[string]any{"said": "again"}})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 20*time.Second, "the flow's webhook", func() bool { return len(flowHook.received()) == 1 })
			if h := flowHook.received()[0]; !h.valid || h.event.Data.ID != run2.ID {
				t.Fatalf("the flow's webhook: %+v", h)
			}
			if len(recv.received()) != 2 {
				t.Fatal("the run's webhook got the run that named none")
			}
			// another tenant does not see the deliveries
			_, other, err := CreateKey(ctx, s.srv.cat, "other", "", false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := api.NewClient(s.base, other).Deliveries(ctx, "t1", run.ID); !api.IsCode(err, api.CodeNotFound) {
				t.Fatalf("another tenant: %v", err)
			}
		})
	}
}

// A host name on the allow-list never reaches a forbidden address: a
// literal loopback URL is refused at the run's start, and a listed name
// whose DNS answers 127.0.0.1 (or rebinds to it) is refused where it is
// dialled, the delivery failed with the reason and nothing posted.
func TestWebhookHostNameNeverReachesLoopback(t *testing.T) {
	cfg, secret := hookConfig(t, "*.hooks.customer.test")
	dns := egresstest.NewDNS(t, netip.MustParseAddr("127.0.0.1"))
	cfg.Allow.Resolver = dns.Resolver()
	recv := newReceiver(t, secret)
	port := recv.srv.URL[strings.LastIndex(recv.srv.URL, ":"):]
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "", func(c *Config) { c.Webhooks = cfg })
	if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: "t1", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.acme.StartRun(ctx, "t1", api.StartRun{Input: map[string]any{"said": "hi"}, Webhook: recv.srv.URL})
	if ae := asAPIError(err); ae == nil || ae.Code != api.CodeInvalidInput || !strings.Contains(ae.Message, "127.0.0.1 is a loopback address") {
		t.Fatalf("a loopback address with a host name listed: %v", err)
	}
	run, err := s.acme.RunWait(ctx, "t1", api.StartRun{Input: map[string]any{"said": "hi"}, Webhook: "http://a.hooks.customer.test" + port + "/h"})
	if err != nil {
		t.Fatal(err)
	}
	var ds *api.Deliveries
	eventually(t, 20*time.Second, "the delivery's end", func() bool {
		ds, err = s.acme.Deliveries(ctx, "t1", run.ID)
		return err == nil && len(ds.Deliveries) == 1 && ds.Deliveries[0].Status == "failed"
	})
	if a := ds.Deliveries[0].Attempts; len(a) != 1 || !strings.Contains(a[0].Error, "resolves to 127.0.0.1, a loopback address, which no host name opens") {
		t.Fatalf("attempts: %+v", a)
	}
	if len(dns.Asked()) == 0 || len(recv.received()) != 0 {
		t.Fatalf("asked %v, received %d", dns.Asked(), len(recv.received()))
	}
}

// A run naming a webhook the allow-list does not permit is refused
// before anything is recorded; a server with no allow-list sends none
// (the default), and one with a list but no secret does not start.
func TestWebhookAllowList(t *testing.T) {
	rt := openRuntime(t, "memory")
	flows := stepFlows(t, 1)
	recv := newReceiver(t, []byte("unused"))
	for name, cfg := range map[string]*WebhookConfig{"none": nil, "elsewhere": func() *WebhookConfig { c, _ := hookConfig(t, "10.0.0.0/8"); return c }()} {
		t.Run(name, func(t *testing.T) {
			s := serve(t, rt, flows, "", func(c *Config) { c.Webhooks = cfg })
			id := "t-" + name
			if _, err := s.acme.CreateThread(ctx, api.CreateThread{ID: id, Flow: "steps"}); err != nil {
				t.Fatal(err)
			}
			_, err := s.acme.StartRun(ctx, id, api.StartRun{Input: map[string]any{"said": "hi"}, Webhook: recv.srv.URL})
			ae := asAPIError(err)
			if !api.IsCode(err, api.CodeInvalidInput) || ae == nil || !strings.Contains(fmt.Sprint(ae.Details), "field:webhook") || !strings.Contains(ae.Message, "allow-list") {
				t.Fatalf("a webhook not allowed: %v", err)
			}
			if runs, err := s.acme.Runs(ctx, id); err != nil || len(runs) != 0 {
				t.Fatalf("a refused run was recorded: %v %v", runs, err)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(recv.received()); n != 0 {
		t.Fatalf("%d messages sent where none may go", n)
	}
	list, _ := egress.Parse([]string{"127.0.0.1"})
	if _, err := New(Config{Runtime: rt, FlowsDir: flows, Kinds: alltest.WithTestKinds(), Logger: discard(), Webhooks: &WebhookConfig{Allow: list}}); err == nil ||
		!strings.Contains(err.Error(), WebhookSecretEnv) {
		t.Fatalf("a server with an allow-list and no secret: %v", err)
	}
	secret, _ := webhook.ParseSecret(webhook.NewSecret())
	if _, err := New(Config{Runtime: rt, FlowsDir: flows, Kinds: alltest.WithTestKinds(), Logger: discard(), Webhooks: &WebhookConfig{Allow: list, Secret: secret,
		Flows: map[string]string{"steps": "http://10.1.2.3/h"}}}); err == nil || !strings.Contains(err.Error(), "allow-list") {
		t.Fatalf("a flow's webhook the list does not permit: %v", err)
	}
}
