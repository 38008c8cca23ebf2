package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/egress/egresstest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/webhook"
)

// The signature of Standard Webhooks' own example verifies, and one of
// a changed body, id or time does not.
func TestSignatureOfTheStandard(t *testing.T) {
	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	if got := webhook.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", at, body); got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("signature %s", got)
	}
	h := http.Header{}
	h.Set(webhook.HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(webhook.HeaderTimestamp, "1614265330")
	h.Set(webhook.HeaderSignature, "v1,bogus v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	if err := webhook.Verify(secret, h, body, 5*time.Minute, at.Add(time.Minute)); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := webhook.Verify(secret, h, []byte(`{"test": 2432232315}`), 5*time.Minute, at); !errors.Is(err, webhook.ErrNoSignature) {
		t.Fatalf("a changed body: %v", err)
	}
	if err := webhook.Verify(secret, h, body, 5*time.Minute, at.Add(time.Hour)); !errors.Is(err, webhook.ErrStale) {
		t.Fatalf("an old message: %v", err)
	}
	h.Set(webhook.HeaderID, "msg_other")
	if err := webhook.Verify(secret, h, body, 5*time.Minute, at); !errors.Is(err, webhook.ErrNoSignature) {
		t.Fatalf("another id: %v", err)
	}
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2hvcnQ=", "whsec_!!"} {
		if _, err := webhook.ParseSecret(bad); err == nil {
			t.Errorf("secret %q taken", bad)
		}
	}
	if _, err := webhook.ParseSecret(webhook.NewSecret()); err != nil {
		t.Fatal(err)
	}
}

// A delivery answered 500 is tried again after its backoff, then
// delivered; each attempt is recorded, and every message carries a
// valid signature.
func TestSenderRetriesAndRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secret, _ := webhook.ParseSecret(webhook.NewSecret())
	var mu sync.Mutex
	var got []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := webhook.Verify(secret, r.Header, body, time.Minute, time.Now()); err != nil {
			t.Errorf("receiver: %v", err)
		}
		mu.Lock()
		got = append(got, r.Header.Get(webhook.HeaderID)+" "+string(body))
		n := len(got)
		mu.Unlock()
		if n < 3 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer recv.Close()
	st := memory.New()
	now := time.Now().UTC()
	if err := st.CreateRun(ctx, &store.RunRecord{ID: "run-1", Tenant: "acme", Thread: "acme/t", Status: store.RunSucceeded, Created: now, Finished: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddDelivery(ctx, &store.Delivery{ID: "hook-1", Tenant: "acme", Thread: "acme/t", Run: "run-1", URL: recv.URL + "/h", Created: now}); err != nil {
		t.Fatal(err)
	}
	allow, _ := egress.Parse([]string{"127.0.0.1"})
	s := &webhook.Sender{Store: st, Server: "s1", Secret: secret, Allow: allow, Backoff: 100 * time.Millisecond, Every: 20 * time.Millisecond,
		Payload: func(_ context.Context, d *store.Delivery) ([]byte, error) {
			return []byte(`{"run":"` + d.Run + `"}`), nil
		}}
	go s.Run(ctx)
	var ds []*store.Delivery
	for ctx.Err() == nil {
		ds, _ = st.Deliveries(ctx, "acme", "run-1")
		if len(ds) == 1 && ds[0].Status != store.DeliveryPending {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	d := ds[0]
	if d.Status != store.DeliveryDelivered || d.Attempts != 3 || len(d.Log) != 3 {
		t.Fatalf("delivery: %+v", d)
	}
	for i, want := range []int{500, 500, 200} {
		if a := d.Log[i]; a.N != i+1 || a.Status != want || a.Server != "s1" || (want == 500) != (a.Error != "") || a.Took <= 0 {
			t.Errorf("attempt %d: %+v", i+1, a)
		}
	}
	if gap := d.Log[1].At.Sub(d.Log[0].At); gap < 80*time.Millisecond {
		t.Errorf("the second attempt came %v after the first, before its backoff", gap)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 || got[2] != `hook-1 {"run":"run-1"}` {
		t.Fatalf("received %q", got)
	}
}

// A delivery to an address the list does not permit fails at once, for
// good, with the reason recorded, and nothing is sent.
func TestSenderRefusesAddressesNotAllowed(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	st := memory.New()
	now := time.Now().UTC()
	_ = st.CreateRun(ctx, &store.RunRecord{ID: "run-1", Tenant: "acme", Thread: "acme/t", Status: store.RunFailed, Created: now, Finished: now})
	_ = st.AddDelivery(ctx, &store.Delivery{ID: "hook-1", Tenant: "acme", Thread: "acme/t", Run: "run-1", URL: recv.URL, Created: now})
	allow, _ := egress.Parse([]string{"10.0.0.0/8"})
	s := &webhook.Sender{Store: st, Server: "s1", Secret: []byte("0123456789abcdef01234567"), Allow: allow,
		Payload: func(context.Context, *store.Delivery) ([]byte, error) { return []byte(`{}`), nil }}
	if sent, err := s.DeliverOne(ctx); !sent || err != nil {
		t.Fatalf("deliver: %v %v", sent, err)
	}
	ds, _ := st.Deliveries(ctx, "acme", "run-1")
	if d := ds[0]; d.Status != store.DeliveryFailed || d.Attempts != 1 || !strings.Contains(d.Log[0].Error, "allow-list") {
		t.Fatalf("delivery: %+v", d)
	}
	if hits.Load() != 0 {
		t.Fatal("sent to an address not allowed")
	}
}

// A delivery to a name on the list that resolves, when it is posted, to
// a loopback address (its DNS aimed at the server) fails for good with
// the reason, and nothing is sent.
func TestSenderRefusesANameResolvingToLoopback(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	port := recv.URL[strings.LastIndex(recv.URL, ":"):]
	st := memory.New()
	now := time.Now().UTC()
	_ = st.CreateRun(ctx, &store.RunRecord{ID: "run-1", Tenant: "acme", Thread: "acme/t", Status: store.RunSucceeded, Created: now, Finished: now})
	_ = st.AddDelivery(ctx, &store.Delivery{ID: "hook-1", Tenant: "acme", Thread: "acme/t", Run: "run-1", URL: "http://a.hooks.customer.test" + port + "/h", Created: now})
	allow, err := egress.Parse([]string{"*.hooks.customer.test"})
	if err != nil {
		t.Fatal(err)
	}
	allow.Resolver = egresstest.NewDNS(t, netip.MustParseAddr("127.0.0.1")).Resolver()
	s := &webhook.Sender{Store: st, Server: "s1", Secret: []byte("0123456789abcdef01234567"), Allow: allow,
		Payload: func(context.Context, *store.Delivery) ([]byte, error) { return []byte(`{}`), nil }}
	if sent, err := s.DeliverOne(ctx); !sent || err != nil {
		t.Fatalf("deliver: %v %v", sent, err)
	}
	ds, _ := st.Deliveries(ctx, "acme", "run-1")
	if d := ds[0]; d.Status != store.DeliveryFailed || d.Attempts != 1 || d.Log[0].Error != "a.hooks.customer.test resolves to 127.0.0.1, a loopback address, which no host name opens (only an address or a network inside 127.0.0.0/8 on the allow-list does)" {
		t.Fatalf("delivery: %+v", d)
	}
	if hits.Load() != 0 {
		t.Fatal("posted to loopback through a listed name")
	}
}

// A receiver that does not answer holds up no other receiver's messages.
func TestSlowReceiverHoldsUpNoOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	release := make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer recv.Close()
	defer close(release)
	st := memory.New()
	now := time.Now().UTC()
	for i, path := range []string{"/slow", "/fast"} {
		run := fmt.Sprint("run-", i)
		_ = st.CreateRun(ctx, &store.RunRecord{ID: run, Tenant: "acme", Thread: "acme/t", Status: store.RunSucceeded, Created: now, Finished: now})
		_ = st.AddDelivery(ctx, &store.Delivery{ID: "hook-" + run, Tenant: "acme", Thread: "acme/t", Run: run, URL: recv.URL + path, Created: now.Add(time.Duration(i))})
	}
	allow, _ := egress.Parse([]string{"127.0.0.1"})
	s := &webhook.Sender{Store: st, Server: "s1", Secret: []byte("0123456789abcdef01234567"), Allow: allow, Timeout: 20 * time.Second, Every: 20 * time.Millisecond,
		Payload: func(context.Context, *store.Delivery) ([]byte, error) { return []byte(`{}`), nil }}
	go s.Run(ctx)
	for ctx.Err() == nil {
		if ds, _ := st.Deliveries(ctx, "acme", "run-1"); len(ds) == 1 && ds[0].Status == store.DeliveryDelivered {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the fast receiver's message waited for the slow one's")
}

// A receiver that answered as its sender's server began to stop has its
// answer recorded: the delivery is delivered, not tried again by another
// server (which would post it twice).
func TestAnswerRecordedAsTheServerStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answered, stopped := make(chan struct{}), make(chan struct{})
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("received"))
		w.(http.Flusher).Flush()
		time.Sleep(200 * time.Millisecond) // the sender reads the answer's head
		close(answered)
		<-stopped
	}))
	defer recv.Close()
	st := memory.New()
	now := time.Now().UTC()
	if err := st.CreateRun(ctx, &store.RunRecord{ID: "run-1", Tenant: "acme", Thread: "acme/t", Status: store.RunSucceeded, Created: now, Finished: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddDelivery(ctx, &store.Delivery{ID: "hook-1", Tenant: "acme", Thread: "acme/t", Run: "run-1", URL: recv.URL + "/h", Created: now}); err != nil {
		t.Fatal(err)
	}
	allow, _ := egress.Parse([]string{"127.0.0.1"})
	s := &webhook.Sender{Store: st, Server: "s1", Secret: []byte("0123456789abcdef01234567"), Allow: allow,
		Payload: func(context.Context, *store.Delivery) ([]byte, error) { return []byte(`{}`), nil }}
	go func() {
		<-answered
		cancel() // the server stops as the answer's body comes
		time.Sleep(100 * time.Millisecond)
		close(stopped)
	}()
	if sent, err := s.DeliverOne(ctx); !sent || err != nil {
		t.Fatalf("delivering: %v %v", sent, err)
	}
	ds, err := st.Deliveries(context.Background(), "acme", "run-1")
	if err != nil || len(ds) != 1 {
		t.Fatalf("%+v %v", ds, err)
	}
	if d := ds[0]; d.Status != store.DeliveryDelivered || d.Attempts != 1 || len(d.Log) != 1 || d.Log[0].Status != 200 {
		t.Fatalf("the delivery answered as the server stopped: %+v", d)
	}
}
