package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	trellisapi "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/store"
)

const chatV1 = `version: 1
name: chat
state:
  schema:
    type: object
    properties:
      message: {type: string, default: ""}
      turns: {type: integer, default: 0}
      mood: {type: string, default: "calm"}
input: [message]
nodes:
  count: {kind: assign, set: {turns: "state.turns + 1"}}
edges:
  - {from: START, to: count}
  - {from: count, to: END}
`

// chatV2 retypes mood and adds a required field without a default: both
// break the threads of version 1.
var chatV2 = strings.Replace(chatV1, `mood: {type: string, default: "calm"}`, "mood: {type: integer, default: 0}\n      level: {type: integer}\n    required: [level]", 1)

func writeFlow(t *testing.T, dir, src string) string {
	t.Helper()
	p := filepath.Join(dir, "chat.yaml")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// trellis diff says what a change means for the threads of the old
// version: each change compatible or breaking, with the reason.
func TestDiffClassifiesTheChangeForThreads(t *testing.T) {
	dir := t.TempDir()
	a, b := writeFlow(t, filepath.Join(dir, "a"), chatV1), writeFlow(t, filepath.Join(dir, "b"), chatV2)
	out, errs, code := trellis(t, "diff", a, b)
	if code != 1 || !strings.Contains(out, "(2 breaking changes)") || !strings.Contains(out, `breaking    field "mood" is retyped from string to integer`) ||
		!strings.Contains(out, `breaking    field "level" is new, required and has no default`) {
		t.Fatalf("%d\n%s%s", code, out, errs)
	}
	c := writeFlow(t, filepath.Join(dir, "c"), strings.Replace(chatV1, "state.turns + 1", "state.turns + 2", 1))
	out, _, _ = trellis(t, "diff", a, c)
	if strings.Contains(out, "breaking") {
		t.Fatalf("a changed node is breaking:\n%s", out)
	}
}

// trellis threads migrate moves a served thread onto another version of
// its flow: refused with the reasons across a breaking change, done with
// a migration, and recorded in the thread's history.
func TestThreadsMigrate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	addr := "sqlite:" + filepath.Join(dir, "s.db")
	rt, err := trellisapi.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := trellisapi.NewVersions(rt.Store(), trellisapi.Offline())
	if err != nil {
		t.Fatal(err)
	}
	v1, err := trellisapi.Load(writeFlow(t, filepath.Join(dir, "v1"), chatV1), trellisapi.Offline())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := trellisapi.Load(writeFlow(t, filepath.Join(dir, "v2"), chatV2), trellisapi.Offline())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*trellisapi.Flow{v1, v2} {
		if err := vs.Keep(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, err := rt.Run(ctx, v1, "acme/t", map[string]any{"message": "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := vs.Pin(ctx, "acme", "acme/t", v1); err != nil {
		t.Fatal(err)
	}
	rt.Close()
	to := v2.Version().Version

	_, errs, code := trellis(t, "threads", "migrate", "--store", addr, "--to", to, "acme/t")
	if code == 0 || !strings.Contains(errs, `breaking: field "mood" is retyped`) || !strings.Contains(errs, `breaking: field "level" is new`) {
		t.Fatalf("a breaking move: %d %s", code, errs)
	}
	_, errs, code = trellis(t, "threads", "migrate", "--store", addr, "--to", to, "--set", "level=state.nope", "acme/t")
	if code == 0 || !strings.Contains(errs, `migration of "level"`) {
		t.Fatalf("a migration that does not type-check: %d %s", code, errs)
	}
	out, errs, code := trellis(t, "threads", "migrate", "--store", addr, "--to", to, "--dry-run",
		"--set", "mood=state.mood == 'calm' ? 1 : 0", "--set", "level=state.turns * 10", "acme/t")
	if code != 0 || !strings.Contains(out, "acme/t can move from version "+v1.Version().Version) {
		t.Fatalf("a dry run: %d %s%s", code, out, errs)
	}
	out, errs, code = trellis(t, "threads", "migrate", "--store", addr, "--to", to,
		"--set", "mood=state.mood == 'calm' ? 1 : 0", "--set", "level=state.turns * 10", "acme/t")
	if code != 0 || !strings.Contains(out, "acme/t moved from version "+v1.Version().Version+" to "+to) {
		t.Fatalf("a move with a migration: %d %s%s", code, out, errs)
	}
	out, _, _ = trellis(t, "history", "--store", addr, "--source", "migrate", "acme/t")
	if !strings.Contains(out, "migrate") || !strings.Contains(out, "wrote [level, mood]") || !strings.Contains(out, "moved from version "+v1.Version().Version+" to "+to) {
		t.Fatalf("history: %s", out)
	}
	out, _, _ = trellis(t, "state", "--store", addr, "acme/t")
	if !strings.Contains(out, `"level": 30`) || !strings.Contains(out, `"mood": 1`) {
		t.Fatalf("state: %s", out)
	}
	out, _, code = trellis(t, "threads", "migrate", "--store", addr, "--to", to, "acme/t")
	if code != 0 || !strings.Contains(out, "on version "+to+" already") {
		t.Fatalf("a second move: %d %s", code, out)
	}
}

// trellis threads migrate refuses a thread with a run queued or running
// (a server would run it on the version it was queued for, or is running
// it), whichever run is the newest, and leaves the thread as it was; once
// the runs are done, it moves.
func TestThreadsMigrateRefusedWhileARunIsQueued(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	addr := "sqlite:" + filepath.Join(dir, "s.db")
	rt, err := trellisapi.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := trellisapi.NewVersions(rt.Store(), trellisapi.Offline())
	if err != nil {
		t.Fatal(err)
	}
	v1, err := trellisapi.Load(writeFlow(t, filepath.Join(dir, "v1"), chatV1), trellisapi.Offline())
	if err != nil {
		t.Fatal(err)
	}
	v2, err := trellisapi.Load(writeFlow(t, filepath.Join(dir, "v2"), strings.Replace(chatV1, "state.turns + 1", "state.turns + 2", 1)), trellisapi.Offline())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*trellisapi.Flow{v1, v2} {
		if err := vs.Keep(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.Run(ctx, v1, "acme/t", map[string]any{"message": "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := vs.Pin(ctx, "acme", "acme/t", v1); err != nil {
		t.Fatal(err)
	}
	cat, _ := store.CatalogOf(rt.Store())
	if err := cat.CreateThread(ctx, &store.ThreadRecord{ID: "acme/t", Tenant: "acme", Flow: "chat", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// a run running on a server (that died, say, and no other adopted it
	// yet), and a newer one queued behind it and cancelled: the newest
	// run is done, the thread is not idle
	running := &store.RunRecord{ID: "run_running", Tenant: "acme", Thread: "acme/t", Flow: "chat", FlowVersion: v1.Version().Version,
		Created: time.Now(), Server: "gone"}
	if _, err := cat.EnqueueRun(ctx, running, store.BusyEnqueue); err != nil || running.Status != store.RunRunning {
		t.Fatalf("%+v %v", running, err)
	}
	if _, err := cat.EnqueueRun(ctx, &store.RunRecord{ID: "run_queued", Tenant: "acme", Thread: "acme/t", Flow: "chat",
		FlowVersion: v1.Version().Version, Created: time.Now().Add(time.Millisecond)}, store.BusyEnqueue); err != nil {
		t.Fatal(err)
	}
	refused := func(why string) {
		t.Helper()
		_, errs, code := trellis(t, "threads", "migrate", "--store", addr, "--to", v2.Version().Version, "acme/t")
		if code == 0 || !strings.Contains(errs, "queued or running") {
			t.Fatalf("a move with %s: %d %s", why, code, errs)
		}
	}
	refused("a run running and one queued")
	if _, err := cat.RequestStop(ctx, "acme", "run_queued", store.StopCancel); err != nil {
		t.Fatal(err)
	}
	head, err := rt.State(ctx, "acme/t")
	if err != nil {
		t.Fatal(err)
	}
	rt.Close()
	to := v2.Version().Version

	refused("a run running and a newer one cancelled")
	rt, err = trellisapi.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	vs, _ = trellisapi.NewVersions(rt.Store(), trellisapi.Offline())
	if _, pin, err := vs.ThreadFlow(ctx, "acme", "acme/t"); err != nil || pin.Version != v1.Version().Version {
		t.Fatalf("the refused move changed the thread's version: %+v %v", pin, err)
	}
	if now, err := rt.State(ctx, "acme/t"); err != nil || now.Seq != head.Seq {
		t.Fatalf("the refused move wrote a checkpoint: %+v %v", now, err)
	}
	cat, _ = store.CatalogOf(rt.Store())
	expect := running.State()
	running.Status, running.Finished = store.RunSucceeded, time.Now()
	if err := cat.UpdateRun(ctx, running, expect, nil); err != nil {
		t.Fatal(err)
	}
	rt.Close()
	out, errs, code := trellis(t, "threads", "migrate", "--store", addr, "--to", to, "acme/t")
	if code != 0 || !strings.Contains(out, "acme/t moved from version "+v1.Version().Version+" to "+to) {
		t.Fatalf("a move once the run is cancelled: %d %s%s", code, out, errs)
	}
}

// The help of threads migrate names a served thread as it must be given:
// TENANT/ID.
func TestThreadsMigrateHelpNamesTenantAndID(t *testing.T) {
	out, errs, _ := trellis(t, "threads", "migrate", "--help")
	if help := out + errs; !strings.Contains(help, "TENANT/ID") {
		t.Fatalf("threads migrate --help:\n%s", help)
	}
	_, errs, code := trellis(t, "threads", "migrate", "--to", "0123456789abcdef")
	if code != 2 || !strings.Contains(errs, "TENANT/ID") {
		t.Fatalf("threads migrate with no thread: %d %s", code, errs)
	}
}
