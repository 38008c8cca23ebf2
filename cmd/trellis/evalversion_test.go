package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	facade "github.com/trellisflow/trellis"
)

// --against VERSION with --store compares with a version of the flow the
// store keeps (one a server served), for a flow not in a git repository:
// the version is compiled from the files the store kept, not from the
// working copy, so the change made since shows as deltas.
func TestEvalAgainstFlowVersion(t *testing.T) {
	root := repoCopy(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "versions.db")
	ctx := context.Background()
	rt, err := facade.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	f, err := facade.Load(filepath.Join(root, "flows", "interview.yaml"), facade.Offline())
	if err != nil {
		t.Fatal(err)
	}
	vs, err := facade.NewVersions(rt.Store(), facade.Offline())
	if err != nil {
		t.Fatal(err)
	}
	if err := vs.Keep(ctx, f); err != nil {
		t.Fatal(err)
	}
	version := f.Version().Version
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	editFile(t, filepath.Join(root, "flows", "interview.yaml"),
		"10.0 * min(1.0, float(.words ?? 0) / 25.0)", "10.0 * min(1.0, float(.words ?? 0) / 50.0)")
	dataset := filepath.Join(root, "flows", "interview.eval.yaml")
	out, errs, code := trellis(t, "eval", "--against", version, "--store", db, "--run", "strong", dataset)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"compared with interview@" + version,
		"FAIL   a strong candidate",
		"1/1 → 0/1 regressed",
		"communication 9 → 6.5 (-2.5)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	// a version the store does not keep, outside a git repository
	_, errs, code = trellis(t, "eval", "--against", "0123456789ab", "--store", db, dataset)
	if code != 2 || !strings.Contains(errs, "nor is it a version of flow interview") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
