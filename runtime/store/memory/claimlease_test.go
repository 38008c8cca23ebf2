package memory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// Runs claimed with their thread's lease beside deletions of threads take
// the store's locks in one order: neither waits on the other for ever.
func TestClaimsWithLeasesBesideDeletions(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	const n = 2000
	for i := range n {
		if err := st.CreateThread(ctx, &store.ThreadRecord{ID: fmt.Sprint("t", i), Tenant: "acme", Flow: "f", Created: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := &store.RunRecord{ID: fmt.Sprint("r", i), Tenant: "acme", Thread: fmt.Sprint("t", i), Flow: "f", Created: time.Now(), Server: "s",
					Lease: &store.LeaseClaim{Owner: "e", TTL: time.Minute}}
				_, _ = st.EnqueueRun(ctx, r, store.BusyReject)
			})
			wg.Go(func() { _ = st.Delete(ctx, fmt.Sprint("t", (i+1)%n)) })
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("claims with leases and deletions wait on each other")
	}
}
