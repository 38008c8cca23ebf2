package server

import (
	"errors"
	"slices"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// A thread's runs are listed newest first a page at a time: each page's
// next reads the page after it, until the last, which has none; every
// run is listed once. A cursor that names no run of the thread, and a
// limit out of its range, are refused naming the parameter.
func TestRunsArePaged(t *testing.T) {
	rt, _ := hookedRuntime(t, "sqlite")
	a := serve(t, rt, stepFlows(t, 1), "")
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.acme.CreateThread(ctx, api.CreateThread{ID: "other", Flow: "steps"}); err != nil {
		t.Fatal(err)
	}
	var started []string
	for range 5 {
		r, err := a.acme.RunWait(ctx, "t", api.StartRun{Input: map[string]any{"said": "hi"}})
		if err != nil || r.Status != api.RunSucceeded {
			t.Fatalf("%+v %v", r, err)
		}
		started = append(started, r.ID)
	}
	o, err := a.acme.RunWait(ctx, "other", api.StartRun{Input: map[string]any{"said": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	var sizes []int
	q := api.RunQuery{Limit: 2}
	for {
		page, err := a.acme.RunPage(ctx, "t", q)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.Runs))
		for _, r := range page.Runs {
			listed = append(listed, r.ID)
		}
		if page.Next == "" {
			break
		}
		if page.Next != listed[len(listed)-1] {
			t.Fatalf("next %q, want the page's last run %q", page.Next, listed[len(listed)-1])
		}
		q.Before = page.Next
	}
	slices.Reverse(started)
	if !slices.Equal(listed, started) || !slices.Equal(sizes, []int{2, 2, 1}) {
		t.Fatalf("listed %v in pages of %v, want %v newest first in pages of 2, 2, 1", listed, sizes, started)
	}
	if all, err := a.acme.Runs(ctx, "t"); err != nil || len(all) != 5 {
		t.Fatalf("one page of the default size: %d %v", len(all), err)
	}
	for _, bad := range []api.RunQuery{{Before: o.ID}, {Before: "run_none"}, {Limit: 501}} {
		_, err := a.acme.RunPage(ctx, "t", bad)
		var ae *api.Error
		want := "before"
		if bad.Limit != 0 {
			want = "limit"
		}
		if !errors.As(err, &ae) || ae.Status != 400 || parameterOf(ae) != want {
			t.Errorf("%+v: %v, want a 400 naming %s", bad, err, want)
		}
	}
}
