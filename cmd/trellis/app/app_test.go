package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/app"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
)

// counting is a store from outside the module's registry: SQLite under a
// scheme of its own, counting the steps it commits.
type counting struct {
	*sqlite.Store
	commits *atomic.Int64
}

func (c counting) Commit(ctx context.Context, cp *store.Checkpoint) error {
	c.commits.Add(1)
	return c.Store.Commit(ctx, cp)
}

var commits atomic.Int64

func init() {
	store.Register("counting", func(ctx context.Context, addr string) (store.Store, error) {
		st, err := sqlite.Open(ctx, strings.TrimPrefix(addr, "counting:"))
		if err != nil {
			return nil, err
		}
		return counting{Store: st, commits: &commits}, nil
	})
}

// The command runs a flow, and lists its thread, on a store registered
// outside this module.
func TestMainWithAStoreOfItsOwn(t *testing.T) {
	addr := "counting:" + filepath.Join(t.TempDir(), "t.db")
	// the count goes on across runs of the test in one process
	before := commits.Load()
	out := captureStdout(t, func() {
		if code := app.Main([]string{"run", "../../../flows/examples/greet.yaml", "--store", addr, "--thread", "t1", "--input", "name=Ada"}); code != 0 {
			t.Fatalf("run exited %d", code)
		}
	})
	if !strings.Contains(out, "Hello, Ada!") {
		t.Fatalf("run printed %q", out)
	}
	if commits.Load() == before {
		t.Fatal("the run committed nothing to the registered store")
	}
	out = captureStdout(t, func() {
		if code := app.Main([]string{"threads", "--store", addr}); code != 0 {
			t.Fatalf("threads exited %d", code)
		}
	})
	if !strings.Contains(out, "t1") {
		t.Fatalf("threads printed %q", out)
	}
}

func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		done <- b.String()
	}()
	defer func() { os.Stdout = old }()
	fn()
	w.Close()
	os.Stdout = old
	return <-done
}
