package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// RunRequests runs the suite of store.Requests; open returns an empty
// store for each subtest.
func RunRequests(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store, rq store.Requests)
	}{
		{"ReserveAnswerReplay", testRequestReserve},
		{"ConcurrentReserveOnce", testRequestConcurrent},
		{"TakeOverAndRelease", testRequestTakeOver},
		{"ExpiredAndPruned", testRequestExpiry},
		{"DeletedWithItsThread", testRequestThreadGone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			rq, ok := store.RequestsOf(st)
			if !ok {
				t.Fatalf("%T keeps no idempotency keys", st)
			}
			tc.fn(t, st, rq)
		})
	}
}

func request(tenant, key, owner string, created time.Time) *store.RequestRecord {
	return &store.RequestRecord{Tenant: tenant, Key: key, Fingerprint: "POST /v1/threads " + key, Ref: "run_" + key, Thread: tenant + "/t-" + key,
		Owner: owner, Locked: created.Add(time.Minute), Created: created}
}

func testRequestReserve(t *testing.T, _ store.Store, rq store.Requests) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	first := request("acme", "k1", "req-1", now)
	kept, fresh, err := rq.ReserveRequest(ctx, first, now.Add(-store.RequestExpiry))
	if err != nil || !fresh {
		t.Fatalf("reserve a new key: fresh %v, %v", fresh, err)
	}
	if kept.Ref != first.Ref || kept.Owner != "req-1" || kept.Status != 0 || !kept.Created.Equal(now) || !kept.Locked.Equal(first.Locked) {
		t.Fatalf("the record reserved: %+v", kept)
	}
	// the same key again: the first request's record, whatever the second asks
	second := request("acme", "k1", "req-2", now.Add(time.Second))
	second.Fingerprint, second.Ref = "other", "run_other"
	kept, fresh, err = rq.ReserveRequest(ctx, second, now.Add(-store.RequestExpiry))
	if err != nil || fresh || kept.Fingerprint != first.Fingerprint || kept.Ref != first.Ref || kept.Owner != "req-1" || kept.Thread != first.Thread {
		t.Fatalf("a key reserved again: fresh %v, %+v, %v", fresh, kept, err)
	}
	// another tenant's key of the same name is another key
	if _, fresh, err := rq.ReserveRequest(ctx, request("other", "k1", "req-3", now), now.Add(-store.RequestExpiry)); err != nil || !fresh {
		t.Fatalf("another tenant's key: fresh %v, %v", fresh, err)
	}
	body := []byte(`{"id":"t-k1","values":{"n":1}}`)
	if err := rq.AnswerRequest(ctx, "acme", "k1", "", 201, body); err != nil {
		t.Fatal(err)
	}
	// the first answer stays
	if err := rq.AnswerRequest(ctx, "acme", "k1", "acme/other", 500, []byte("later")); err != nil {
		t.Fatal(err)
	}
	kept, _, err = rq.ReserveRequest(ctx, second, now.Add(-store.RequestExpiry))
	if err != nil || kept.Status != 201 || !bytes.Equal(kept.Body, body) || kept.Thread != first.Thread {
		t.Fatalf("the answer kept: %d %q %v", kept.Status, kept.Body, err)
	}
	if err := rq.AnswerRequest(ctx, "acme", "nope", "", 200, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("answering a key with no record: %v, want ErrNotFound", err)
	}
	// an answered request is not released nor taken over
	if err := rq.ReleaseRequest(ctx, "acme", "k1", "req-1"); err != nil {
		t.Fatal(err)
	}
	if err := rq.TakeRequest(ctx, "acme", "k1", "req-1", "req-4", now.Add(time.Hour)); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("taking over an answered request: %v, want ErrClaimLost", err)
	}
	if kept, _, err := rq.ReserveRequest(ctx, second, now.Add(-store.RequestExpiry)); err != nil || kept.Status != 201 {
		t.Fatalf("an answered request released: %+v %v", kept, err)
	}
}

// Servers reserving one key at once: one of them has it, and every one
// is told the same record.
func testRequestConcurrent(t *testing.T, _ store.Store, rq store.Requests) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	fresh, owners := 0, map[string]int{}
	for i := range n {
		wg.Go(func() {
			kept, ok, err := rq.ReserveRequest(ctx, request("acme", "same", fmt.Sprintf("req-%d", i), now), now.Add(-store.RequestExpiry))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				fresh++
			}
			owners[kept.Owner]++
		})
	}
	wg.Wait()
	if fresh != 1 || len(owners) != 1 {
		t.Fatalf("%d of %d reserved the key; they were told of owners %v", fresh, n, owners)
	}
}

func testRequestTakeOver(t *testing.T, _ store.Store, rq store.Requests) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if _, _, err := rq.ReserveRequest(ctx, request("acme", "k", "req-1", now), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := rq.TakeRequest(ctx, "acme", "k", "req-1", "req-2", now.Add(2*time.Minute)); err != nil {
		t.Fatalf("take over: %v", err)
	}
	if err := rq.TakeRequest(ctx, "acme", "k", "req-1", "req-3", now.Add(2*time.Minute)); !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("a second take-over from the first owner: %v, want ErrClaimLost", err)
	}
	if err := rq.TakeRequest(ctx, "acme", "none", "req-1", "req-3", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("taking over a key with no record: %v, want ErrNotFound", err)
	}
	kept, _, err := rq.ReserveRequest(ctx, request("acme", "k", "req-9", now), time.Time{})
	if err != nil || kept.Owner != "req-2" || !kept.Locked.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("after the take-over: %+v %v", kept, err)
	}
	// the owner it was taken from releases nothing
	if err := rq.ReleaseRequest(ctx, "acme", "k", "req-1"); err != nil {
		t.Fatal(err)
	}
	if kept, fresh, _ := rq.ReserveRequest(ctx, request("acme", "k", "req-9", now), time.Time{}); fresh || kept.Owner != "req-2" {
		t.Fatalf("released by an owner it was taken from: fresh %v, %+v", fresh, kept)
	}
	// its owner releases it: the key is free again
	if err := rq.ReleaseRequest(ctx, "acme", "k", "req-2"); err != nil {
		t.Fatal(err)
	}
	if kept, fresh, err := rq.ReserveRequest(ctx, request("acme", "k", "req-9", now), time.Time{}); err != nil || !fresh || kept.Owner != "req-9" {
		t.Fatalf("a released key reserved again: fresh %v, %+v, %v", fresh, kept, err)
	}
}

func testRequestExpiry(t *testing.T, _ store.Store, rq store.Requests) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := now.Add(-store.RequestExpiry - time.Minute)
	for i := range 5 {
		if _, _, err := rq.ReserveRequest(ctx, request("acme", fmt.Sprintf("old-%d", i), "req", old.Add(time.Duration(i)*time.Second)), time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := rq.ReserveRequest(ctx, request("acme", "young", "req", now), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := rq.AnswerRequest(ctx, "acme", "old-0", "", 201, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// a key older than the expiry is reserved anew, answer and all
	kept, fresh, err := rq.ReserveRequest(ctx, request("acme", "old-0", "req-new", now), now.Add(-store.RequestExpiry))
	if err != nil || !fresh || kept.Status != 0 || kept.Owner != "req-new" {
		t.Fatalf("an expired key: fresh %v, %+v, %v", fresh, kept, err)
	}
	n, err := rq.PruneRequests(ctx, now.Add(-store.RequestExpiry), 2)
	if err != nil || n != 2 {
		t.Fatalf("prune at most 2: %d %v", n, err)
	}
	n, err = rq.PruneRequests(ctx, now.Add(-store.RequestExpiry), 100)
	if err != nil || n != 2 {
		t.Fatalf("prune the rest: %d %v, want 2", n, err)
	}
	for _, key := range []string{"young", "old-0"} {
		if _, fresh, err := rq.ReserveRequest(ctx, request("acme", key, "req-x", now), now.Add(-store.RequestExpiry)); err != nil || fresh {
			t.Fatalf("%s pruned: fresh %v, %v", key, fresh, err)
		}
	}
}

// A thread's keys are deleted with the thread (an answer may hold its
// state); the others stay.
func testRequestThreadGone(t *testing.T, st store.Store, rq store.Requests) {
	cat, ok := st.(store.Catalog)
	if !ok {
		t.Skip("the store keeps no catalog of threads")
	}
	now := time.Now().UTC()
	for _, th := range []string{"acme/gone", "acme/kept"} {
		if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: th, Tenant: "acme", Flow: "f", Created: now}); err != nil {
			t.Fatal(err)
		}
		r := request("acme", "key-"+th, "req", now)
		r.Thread = th
		if _, _, err := rq.ReserveRequest(ctx, r, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	tenantWide := request("acme", "memory", "req", now)
	tenantWide.Thread = ""
	if _, _, err := rq.ReserveRequest(ctx, tenantWide, time.Time{}); err != nil {
		t.Fatal(err)
	}
	// a request about no thread until its answer names the one it made
	made := request("acme", "made", "req", now)
	made.Thread = ""
	if _, _, err := rq.ReserveRequest(ctx, made, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := rq.AnswerRequest(ctx, "acme", "made", "acme/gone", 201, []byte(`{"id":"gone"}`)); err != nil {
		t.Fatal(err)
	}
	if err := cat.DeleteThread(ctx, "acme", "acme/gone"); err != nil {
		t.Fatal(err)
	}
	for key, gone := range map[string]bool{"key-acme/gone": true, "made": true, "key-acme/kept": false, "memory": false} {
		if _, fresh, err := rq.ReserveRequest(ctx, request("acme", key, "req-again", now), time.Time{}); err != nil || fresh != gone {
			t.Errorf("key %s after the thread was deleted: reserved anew %v, want %v (%v)", key, fresh, gone, err)
		}
	}
}
