package server

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// A schedule that starts an interview on a new thread each tick gives
// each thread the initial values the schedule holds, and every tick's
// run succeeds; values or input that would fail every tick are refused
// as the schedule is created, with the field at fault, and nothing is
// kept.
func TestScheduledInterviewOnANewThreadEachTick(t *testing.T) {
	s := serve(t, openRuntime(t, "sqlite:"+filepath.Join(t.TempDir(), "s.db")), flowsDir, "", func(c *Config) { c.Kinds = all.Offline() })
	v := values(t, flowsDir+"/examples/candidate.yaml")
	v["interview_id"], v["user_id"], v["max_questions"] = "nightly", "ada", 2

	bad := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{}
		for k, x := range v {
			c[k] = x
		}
		edit(c)
		return c
	}
	for _, c := range []struct {
		name   string
		in     api.CreateSchedule
		field  string
		saying []string
	}{
		{"no values", api.CreateSchedule{Flow: "interview"}, "values", []string{`"interview_id"`, `"user_id"`, "required"}},
		{"a required value missing", api.CreateSchedule{Flow: "interview", Values: bad(func(m map[string]any) { delete(m, "user_id") })},
			"values", []string{`"user_id"`, "required"}},
		{"an unknown value", api.CreateSchedule{Flow: "interview", Values: bad(func(m map[string]any) { m["user_idd"] = "x" })},
			"values", []string{`"user_idd"`, `did you mean "user_id"`}},
		{"a value of the wrong type", api.CreateSchedule{Flow: "interview", Values: bad(func(m map[string]any) { m["max_questions"] = "two" })},
			"values", []string{`"max_questions"`}},
		{"an input of the wrong type", api.CreateSchedule{Flow: "interview", Values: v, Input: map[string]any{"last_response": 7}},
			"input", []string{`"last_response"`}},
		{"values on a thread's schedule", api.CreateSchedule{Thread: "nope", Values: v}, "values", []string{"new thread"}},
	} {
		c.in.ID, c.in.Cron = "refused", "* * * * * *"
		_, err := s.acme.CreateSchedule(ctx, c.in)
		if !api.IsCode(err, api.CodeInvalidInput) {
			t.Errorf("%s: %v, want invalid_input on %s", c.name, err, c.field)
			_ = s.acme.DeleteSchedule(ctx, "refused")
			continue
		}
		ae := asAPIError(err)
		if !strings.Contains(fmt.Sprint(ae.Details), "field:"+c.field) {
			t.Errorf("%s: %v (details %v), want invalid_input on %s", c.name, err, ae.Details, c.field)
		}
		for _, want := range c.saying {
			if !strings.Contains(ae.Message, want) {
				t.Errorf("%s: %q does not say %s", c.name, ae.Message, want)
			}
		}
	}
	if list, err := s.acme.Schedules(ctx, "", 0); err != nil || len(list.Schedules) != 0 {
		t.Fatalf("refused schedules were kept: %+v %v", list, err)
	}

	sc, err := s.acme.CreateSchedule(ctx, api.CreateSchedule{ID: "nightly", Flow: "interview", Cron: "* * * * * *", Values: v})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Values["user_id"] != "ada" {
		t.Fatalf("the schedule's values: %+v", sc.Values)
	}
	cat, _ := store.CatalogOf(s.rt.Store())
	var done []*store.RunRecord
	eventually(t, 30*time.Second, "two ticks' interviews", func() bool {
		threads, err := cat.ListThreads(ctx, store.ThreadQuery{Tenant: "acme", Metadata: map[string]string{"schedule": "nightly"}})
		if err != nil {
			t.Fatal(err)
		}
		done = done[:0]
		for _, th := range threads {
			runs, err := cat.Runs(ctx, store.RunQuery{Tenant: "acme", Thread: th.ID})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range runs {
				if r.Status.Done() {
					done = append(done, r)
				}
			}
		}
		return len(done) >= 2
	})
	if err := s.acme.DeleteSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	for _, r := range done {
		if r.Status != store.RunSucceeded {
			t.Errorf("run %s: %s %s", r.ID, r.Status, r.Error)
			continue
		}
		st, err := s.acme.State(ctx, publicID(r.Thread), 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Values["interview_id"] != "nightly" || st.Values["user_id"] != "ada" || st.Values["next_message"] == "" {
			t.Errorf("thread %s after its tick: %v", r.Thread, st.Values)
		}
	}
}
