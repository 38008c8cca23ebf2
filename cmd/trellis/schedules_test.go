package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/cmd/trellis/internal/server"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// trellis schedules creates, lists, pauses, resumes and deletes a served
// schedule through the API, whose ticks start runs on new threads.
func TestSchedulesCommand(t *testing.T) {
	ctx := context.Background()
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "quick.yaml"), []byte(quickFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := facade.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	cat, _ := store.CatalogOf(rt.Store())
	_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	_, stderr := kindsProcess(t, "serve", "--flows", flows, "--store", db, "--addr", addr)
	c := api.NewClient("http://"+addr, key)
	waitReady(t, c)
	t.Setenv("TRELLIS_API_KEY", key)
	run := func(args ...string) string {
		t.Helper()
		out, errOut, code := trellis(t, append([]string{"schedules", "--api", "http://" + addr}, args...)...)
		if code != 0 {
			t.Fatalf("schedules %v: %d %s\n%s", args, code, errOut, stderr.String())
		}
		return out
	}
	out := run("create", "--id", "every", "--flow", "quick", "--cron", "* * * * * *", "--zone", "Europe/Paris", "--input", `{"said":"tick"}`, "--metadata", "team=a")
	if !strings.HasPrefix(out, "every\tflow quick\t* * * * * *\tEurope/Paris\tmissed skip\tnext ") {
		t.Fatalf("create: %q", out)
	}
	if _, errOut, code := trellis(t, "schedules", "--api", "http://"+addr, "create", "--flow", "quick", "--cron", "61 * * * *"); code != 2 || !strings.Contains(errOut, "cron") {
		t.Fatalf("a bad cron: %d %s", code, errOut)
	}
	ticks := func() int {
		ts, err := c.Threads(ctx, api.ThreadQuery{Metadata: map[string]string{"schedule": "every"}})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts.Threads)
	}
	for deadline := time.Now().Add(15 * time.Second); ticks() < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ticks:\n%s", stderr.String())
		}
	}
	if out := run("list"); !strings.Contains(out, "every\tflow quick") || !strings.Contains(out, "last ") {
		t.Fatalf("list: %q", out)
	}
	if out := run("pause", "every"); !strings.Contains(out, "\tpaused\t") {
		t.Fatalf("pause: %q", out)
	}
	time.Sleep(300 * time.Millisecond) // a tick under way ends
	n := ticks()
	time.Sleep(2 * time.Second)
	if ticks() != n {
		t.Fatalf("a paused schedule fired: %d threads, then %d", n, ticks())
	}
	if out := run("resume", "every"); !strings.Contains(out, "\tnext ") {
		t.Fatalf("resume: %q", out)
	}
	for deadline := time.Now().Add(15 * time.Second); ticks() <= n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no tick after resuming")
		}
	}
	if out := run("delete", "every"); out != "deleted every\n" {
		t.Fatalf("delete: %q", out)
	}
	if _, errOut, code := trellis(t, "schedules", "--api", "http://"+addr, "get", "every"); code == 0 || !strings.Contains(errOut, "no schedule") {
		t.Fatalf("get a deleted schedule: %d %s", code, errOut)
	}
}
