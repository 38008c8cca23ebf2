package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// Two `trellis serve` processes share PostgreSQL, each with its own flow
// directory (A: version 1 of a flow, B: version 2, started after A so
// that version 1 is the promoted one). New threads through B start on
// version 1 until `trellis flows promote` promotes version 2 through A;
// then new threads through either server start on version 2, and the
// thread made before keeps version 1.
func TestPromoteOnOneServerStartsNewThreadsOnItThroughAnother(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := storetest.Postgres(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	v2 := strings.Replace(quickFlow, `echo: {kind: set, set: {said: "input.said"}}`, `echo: {kind: set, set: {said: "'v2 ' + input.said"}}`, 1)
	for dir, src := range map[string]string{dirA: quickFlow, dirB: v2} {
		if err := os.WriteFile(filepath.Join(dir, "quick.yaml"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := facade.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := store.CatalogOf(rt.Store())
	_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
	if err != nil {
		t.Fatal(err)
	}
	_, adminKey, err := server.CreateKey(ctx, cat, "ops", "", true)
	rt.Close()
	if err != nil {
		t.Fatal(err)
	}
	start := func(flows string) (*api.Client, string) {
		addr := freeAddr(t)
		kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr)
		c := api.NewClient("http://"+addr, key)
		waitUp(t, c)
		return c, "http://" + addr
	}
	a, aURL := start(dirA)
	b, _ := start(dirB)
	fa, err := a.Flow(ctx, "quick")
	if err != nil {
		t.Fatal(err)
	}
	fb, err := b.Flow(ctx, "quick")
	if err != nil || fb.Version == fa.Version || fb.Promoted != fa.Version {
		t.Fatalf("B's flow: %+v %v, want version 2 loaded and A's version %s promoted", fb, err, fa.Version)
	}
	turn := func(c *api.Client, thread, want string) {
		t.Helper()
		th, err := c.CreateThread(ctx, api.CreateThread{ID: thread, Flow: "quick"})
		if err != nil {
			t.Fatal(err)
		}
		run, err := c.RunWait(ctx, thread, api.StartRun{Input: map[string]any{"said": "hi"}})
		if err != nil || run.Status != api.RunSucceeded || run.State["said"] != want {
			t.Fatalf("thread %s (version %s): %+v %v, want said %q", thread, th.Version, run, err, want)
		}
	}
	turn(b, "before", "hi")

	t.Setenv("TRELLIS_API_KEY", adminKey)
	out, errs, code := trellis(t, "flows", "promote", "quick", fb.Version, "--api", aURL)
	if code != 0 || !strings.Contains(out, "new threads start on version "+fb.Version+" (was "+fa.Version+")") {
		t.Fatalf("trellis flows promote: %d %s%s", code, out, errs)
	}
	turn(b, "after-b", "v2 hi")
	turn(a, "after-a", "v2 hi")
	if th, err := b.Thread(ctx, "before"); err != nil || th.Version != fa.Version {
		t.Fatalf("the thread made before the promotion: %+v %v", th, err)
	}
	out, _, code = trellis(t, "flows", "versions", "quick", "--api", aURL)
	if code != 0 || !strings.Contains(out, fb.Version) || !strings.Contains(out, "promoted") {
		t.Fatalf("trellis flows versions: %d %s", code, out)
	}
	t.Setenv("TRELLIS_API_KEY", key)
	if _, errs, code := trellis(t, "flows", "promote", "quick", fa.Version, "--api", aURL); code == 0 || !strings.Contains(errs, "forbidden") {
		t.Fatalf("a tenant's key promoting: %d %s", code, errs)
	}
}
