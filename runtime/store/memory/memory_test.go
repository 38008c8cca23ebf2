package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}

func TestCatalogConformance(t *testing.T) {
	storetest.RunCatalog(t, func(*testing.T) store.Store { return memory.New() })
}

func TestMemoryConformance(t *testing.T) {
	storetest.RunMemory(t, func(*testing.T) store.Store { return memory.New() })
}

// go test ./runtime/store/memory -run '^$' -bench Memory
func BenchmarkMemory(b *testing.B) { storetest.BenchMemory(b, memory.New(), 5000) }

func TestLifecycle(t *testing.T) {
	storetest.RunLifecycle(t, func(*testing.T) store.Store { return memory.New() },
		func(_ *testing.T, st store.Store, needles []string) []string { return storetest.WalkRefs(st, needles) },
		[]string{"threads", "leases", "catalog.threads", "catalog.runs", "catalog.events", "catalog.packs", "catalog.deliveries", "catalog.schedules", "catalog.requests", "voice.sessions"})
}

func TestWebhooksConformance(t *testing.T) {
	storetest.RunWebhooks(t, func(*testing.T) store.Store { return memory.New() })
}

func TestSchedulesConformance(t *testing.T) {
	storetest.RunSchedules(t, func(*testing.T) store.Store { return memory.New() })
}

func TestVersionsConformance(t *testing.T) {
	storetest.RunVersions(t, func(*testing.T) store.Store { return memory.New() })
}

func TestRequestsConformance(t *testing.T) {
	storetest.RunRequests(t, func(*testing.T) store.Store { return memory.New() })
}

// A held chain is committed whole or not at all: one whose links do not
// follow each other (a checkpoint's Parent is not the one before it) is
// refused as a conflict before any of it is committed.
func TestChainLinksFollow(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	step := func(seq uint64) *store.Checkpoint {
		return &store.Checkpoint{Thread: "t", Seq: seq, Parent: seq - 1, Source: store.SourceStep, Time: time.Now(),
			Writes: []store.Write{{Field: "n", Version: seq, Value: int(seq)}}}
	}
	first := &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: time.Now(), Writes: []store.Write{{Field: "n", Version: 1, Value: 1}}}
	if err := st.Commit(ctx, first); err != nil {
		t.Fatal(err)
	}
	broken := step(5)
	broken.Before = []*store.Checkpoint{step(2), step(3)} // 4 is missing
	if err := st.Commit(ctx, broken); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a chain with a gap: %v, want ErrConflict", err)
	}
	if h, err := st.Head(ctx, "t"); err != nil || h.Seq != 1 {
		t.Fatalf("after the refused chain the head is %+v (%v), want 1", h, err)
	}
	whole := step(4)
	whole.Before = []*store.Checkpoint{step(2), step(3)}
	if err := st.Commit(ctx, whole); err != nil {
		t.Fatal(err)
	}
	if h, err := st.Head(ctx, "t"); err != nil || h.Seq != 4 || h.Values["n"] != 4 {
		t.Fatalf("after the chain the head is %+v (%v), want 4 with n 4", h, err)
	}
	if whole.Before != nil {
		t.Fatalf("the committed checkpoint still holds %d others", len(whole.Before))
	}
}
