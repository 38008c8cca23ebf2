package memory_test

import (
	"testing"

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
