package postgres_test

import (
	"testing"

	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// go test ./runtime/store/postgres -run '^$' -bench AppendEvents
func BenchmarkAppendEvents(b *testing.B) {
	storetest.BenchAppendEvents(b, openURL(b, pgtest.Database(b)))
}

// go test ./runtime/store/postgres -run '^$' -bench StepCommits
func BenchmarkStepCommits(b *testing.B) {
	storetest.BenchStepCommits(b, openURL(b, pgtest.Database(b)))
}

// go test ./runtime/store/postgres -run '^$' -bench EnqueueRun: on the
// tests' cluster (no fsync) and on one with PostgreSQL's durability.
func BenchmarkEnqueueRun(b *testing.B) {
	b.Run("fast", func(b *testing.B) { storetest.BenchEnqueueRun(b, openURL(b, pgtest.Database(b))) })
	b.Run("durable", func(b *testing.B) { storetest.BenchEnqueueRun(b, openURL(b, pgtest.DurableDatabase(b))) })
}

// go test ./runtime/store/postgres -run '^$' -bench RunEvents
func BenchmarkRunEvents(b *testing.B) {
	storetest.BenchRunEvents(b, openURL(b, pgtest.Database(b)))
}
