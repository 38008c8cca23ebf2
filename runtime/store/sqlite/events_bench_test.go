package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// benchStore opens a store of its own for a benchmark, closed when it
// ends.
func benchStore(b *testing.B) *sqlite.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// go test ./runtime/store/sqlite -run '^$' -bench AppendEvents
func BenchmarkAppendEvents(b *testing.B) { storetest.BenchAppendEvents(b, benchStore(b)) }

// go test ./runtime/store/sqlite -run '^$' -bench StepCommits
func BenchmarkStepCommits(b *testing.B) { storetest.BenchStepCommits(b, benchStore(b)) }

// go test ./runtime/store/sqlite -run '^$' -bench StepsSideBySide
func BenchmarkStepsSideBySide(b *testing.B) { storetest.BenchStepsSideBySide(b, benchStore(b)) }

// go test ./runtime/store/sqlite -run '^$' -bench EnqueueRun
func BenchmarkEnqueueRun(b *testing.B) { storetest.BenchEnqueueRun(b, benchStore(b)) }

// go test ./runtime/store/sqlite -run '^$' -bench RunEvents
func BenchmarkRunEvents(b *testing.B) { storetest.BenchRunEvents(b, benchStore(b)) }
