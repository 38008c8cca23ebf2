package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/all"
)

// A run stopped between steps leaves the thread refusing new input until
// `trellis abandon` gives the unfinished run up, which history records.
func TestAbandon(t *testing.T) {
	ctx := context.Background()
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	f, err := facade.Load(examples+"/G009.ok.yaml", facade.WithKinds(all.Registry()))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := facade.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	close(stop)
	if _, err := rt.Run(ctx, f, "t1", nil, facade.WithStop(stop)); !errors.Is(err, facade.ErrStopped) {
		t.Fatalf("run: %v", err)
	}
	rt.Close()
	out, stderr, exit := trellis(t, "abandon", "t1", "--store", db)
	if exit != 0 || !strings.Contains(out, "t1: the unfinished run was abandoned at checkpoint") {
		t.Fatalf("abandon: %d %s %s", exit, out, stderr)
	}
	out, _, _ = trellis(t, "history", "t1", "--store", db, "--source", "abandon")
	if !strings.Contains(out, "abandon") {
		t.Fatalf("history lacks the abandon checkpoint:\n%s", out)
	}
	out, _, exit = trellis(t, "abandon", "t1", "--store", db)
	if exit != 0 || !strings.Contains(out, "has no unfinished run") {
		t.Fatalf("second abandon: %d %s", exit, out)
	}
}
