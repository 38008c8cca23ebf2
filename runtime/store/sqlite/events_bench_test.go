package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// go test ./runtime/store/sqlite -run '^$' -bench AppendEvents
func BenchmarkAppendEvents(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "events.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchAppendEvents(b, st)
}

// go test ./runtime/store/sqlite -run '^$' -bench StepCommits
func BenchmarkStepCommits(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "steps.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchStepCommits(b, st)
}

// go test ./runtime/store/sqlite -run '^$' -bench StepsSideBySide
func BenchmarkStepsSideBySide(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "side.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchStepsSideBySide(b, st)
}

// go test ./runtime/store/sqlite -run '^$' -bench EnqueueRun
func BenchmarkEnqueueRun(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "enqueue.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	storetest.BenchEnqueueRun(b, st)
}
