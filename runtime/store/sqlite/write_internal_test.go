package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// A write waiting for this process's writer gives up when its context
// ends, whatever holds the writer.
func TestAWriteWaitsOnlyAsLongAsItsContext(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- s.write(ctx, func() error { close(held); <-release; return nil }) }()
	<-held
	defer func() {
		close(release)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- s.PutPending(wctx, "t", 1, "n", nil) }()
	select {
	case err := <-waited:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the waiting write ended with %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a write whose context ended still waits for the writer")
	}
}
