package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("connect: %w", syscall.ECONNREFUSED)}
	for _, c := range []struct {
		err  error
		want store.Class
	}{
		{nil, store.Permanent},
		{store.ErrConflict, store.Permanent},
		{store.ErrNotFound, store.Permanent},
		{fmt.Errorf("commit step 3: %w", context.Canceled), store.Permanent},
		{context.DeadlineExceeded, store.Permanent},
		{refused, store.Unavailable},
		{fmt.Errorf("commit: %w", syscall.ECONNRESET), store.Unavailable},
		{fmt.Errorf("write: %w", syscall.ENOSPC), store.Full},
		{&store.FullError{Err: errors.New("no room")}, store.Full},
	} {
		if got := store.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

// A store's own answer (not found, a conflict) is permanent, and
// classified without allocating: every run on a new thread meets one.
func TestClassifyAnswerAllocates(t *testing.T) {
	for _, err := range []error{store.ErrNotFound, store.ErrConflict, store.ErrExists, store.ErrLeased} {
		if got := store.Classify(err); got != store.Permanent {
			t.Errorf("Classify(%v) = %s, want permanent", err, got)
		}
		if n := testing.AllocsPerRun(10, func() { store.Classify(err) }); n > 0 {
			t.Errorf("Classify(%v) allocated %.0f times", err, n)
		}
	}
}

// A retrier tries a call again while the store is unavailable, within
// its budget, hears the outage begin and end once each, and gives up a
// permanent error at once.
func TestRetrier(t *testing.T) {
	ctx := context.Background()
	var downs []error
	var backs []time.Duration
	r := &store.Retrier{Budget: 10 * time.Second, Down: func(err error) { downs = append(downs, err) }, Back: func(d time.Duration) { backs = append(backs, d) }}
	calls := 0
	err := r.Do(ctx, func(again bool) error {
		if again != (calls > 0) {
			t.Errorf("call %d: again %v", calls, again)
		}
		if calls++; calls < 4 {
			return syscall.ECONNREFUSED
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("Do: %v after %d calls, want success after 4", err, calls)
	}
	if len(downs) != 1 || len(backs) != 1 || r.Waited() <= 0 {
		t.Fatalf("heard %d outages begin, %d end, waited %s", len(downs), len(backs), r.Waited())
	}
	calls = 0
	if err := r.Do(ctx, func(bool) error { calls++; return store.ErrConflict }); !errors.Is(err, store.ErrConflict) || calls != 1 {
		t.Fatalf("a permanent error: %v after %d calls", err, calls)
	}
	// the budget is spent across calls
	short := &store.Retrier{Budget: 50 * time.Millisecond}
	err = short.Do(ctx, func(bool) error { return syscall.ECONNRESET })
	if !errors.Is(err, store.ErrWaitedOut) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a spent budget: %v", err)
	}
	calls = 0
	if err := short.Do(ctx, func(bool) error { calls++; return syscall.ECONNRESET }); !errors.Is(err, store.ErrWaitedOut) || calls != 1 {
		t.Fatalf("a call after the budget was spent: %v after %d calls", err, calls)
	}
	// the caller's context ends the wait
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := (&store.Retrier{}).Do(cctx, func(bool) error { return syscall.ECONNRESET }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	// a nil retrier calls once
	calls = 0
	if err := (*store.Retrier)(nil).Do(ctx, func(bool) error { calls++; return syscall.ECONNRESET }); calls != 1 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a nil retrier: %v after %d calls", err, calls)
	}
}
