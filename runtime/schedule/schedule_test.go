package schedule_test

import (
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/schedule"
	"github.com/trellisflow/trellis/runtime/store"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestNextInZones(t *testing.T) {
	cases := []struct {
		cron, zone, after, want string
	}{
		{"0 9 * * 1-5", "Europe/Paris", "2026-11-25T08:30:00Z", "2026-11-26T08:00:00Z"},    // 9:00 in Paris is 8:00 UTC in winter
		{"0 9 * * 1-5", "Europe/Paris", "2026-07-01T06:00:00Z", "2026-07-01T07:00:00Z"},    // and 7:00 UTC in summer
		{"30 2 * * *", "America/New_York", "2026-03-08T06:00:00Z", "2026-03-09T06:30:00Z"}, // 2:30 does not exist on the day clocks go forward
		{"*/15 * * * *", "", "2026-11-25T21:07:00Z", "2026-11-25T21:15:00Z"},               // UTC by default
		{"* * * * * *", "UTC", "2026-11-25T21:07:00.5Z", "2026-11-25T21:07:01Z"},           // six fields: seconds first
		{"@daily", "Asia/Tokyo", "2026-11-25T21:07:00Z", "2026-11-26T15:00:00Z"},           // midnight in Tokyo
		{"0 0 29 2 *", "UTC", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},              // the next leap day
	}
	for _, c := range cases {
		spec, err := schedule.Parse(c.cron, c.zone)
		if err != nil {
			t.Fatalf("%s: %v", c.cron, err)
		}
		if got := spec.Next(at(c.after)); !got.Equal(at(c.want)) {
			t.Errorf("%s in %q after %s: %s, want %s", c.cron, c.zone, c.after, got, c.want)
		}
	}
	for _, bad := range [][2]string{{"* * *", "UTC"}, {"61 * * * *", "UTC"}, {"* * * * *", "Mars/Olympus"}, {"CRON_TZ=UTC * * * * *", "UTC"},
		{"@every 1ns", "UTC"}, {"@every 999ms", "UTC"}, {"@every 1500ms", "UTC"}, {"@every 0s", "UTC"}, {"@every -1s", "UTC"}} {
		if _, err := schedule.Parse(bad[0], bad[1]); err == nil {
			t.Errorf("%q in %q was taken", bad[0], bad[1])
		}
	}
	if _, err := schedule.Parse("@every 1ns", "UTC"); err == nil || !strings.Contains(err.Error(), "whole seconds, at least 1s") {
		t.Errorf("@every 1ns: %v", err)
	}
}

// The shortest time between ticks is found however the ticks fall.
func TestShortest(t *testing.T) {
	for cron, want := range map[string]time.Duration{
		"* * * * * *":    time.Second,
		"@every 1s":      time.Second,
		"@every 90s":     90 * time.Second,
		"0,1 * * * * *":  time.Second,
		"*/15 * * * *":   15 * time.Minute,
		"0 0 9,10 * * *": time.Hour,
		"@hourly":        time.Hour,
		"0 0 29 2 *":     4 * 365 * 24 * time.Hour,
	} {
		spec, err := schedule.Parse(cron, "UTC")
		if err != nil {
			t.Fatal(err)
		}
		got := spec.Shortest(at("2026-11-25T21:07:00Z"), 100)
		if cron == "0 0 29 2 *" {
			want = at("2032-02-29T00:00:00Z").Sub(at("2028-02-29T00:00:00Z"))
		}
		if got != want {
			t.Errorf("%s: %v, want %v", cron, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	every, _ := schedule.Parse("* * * * * *", "UTC")
	hourly, _ := schedule.Parse("0 * * * *", "UTC")
	grace := 2 * time.Second
	cases := []struct {
		name   string
		spec   *schedule.Spec
		due    string
		now    string
		policy store.MissedPolicy
		want   schedule.Decision
	}{
		{"on time", every, "2026-11-25T21:00:00Z", "2026-11-25T21:00:00.3Z", store.MissedSkip,
			schedule.Decision{Fire: true, Tick: at("2026-11-25T21:00:00Z"), Next: at("2026-11-25T21:00:01Z")}},
		{"late within the grace", every, "2026-11-25T21:00:00Z", "2026-11-25T21:00:01.9Z", store.MissedSkip,
			schedule.Decision{Fire: true, Tick: at("2026-11-25T21:00:00Z"), Next: at("2026-11-25T21:00:01Z")}},
		{"missed, skipped", every, "2026-11-25T21:00:00Z", "2026-11-25T21:00:10.5Z", store.MissedSkip,
			schedule.Decision{Next: at("2026-11-25T21:00:09Z"), MissedFrom: at("2026-11-25T21:00:00Z"), MissedTo: at("2026-11-25T21:00:08Z")}},
		{"missed, run once", every, "2026-11-25T21:00:00Z", "2026-11-25T21:00:10.5Z", store.MissedRunOnce,
			schedule.Decision{Fire: true, Tick: at("2026-11-25T21:00:08Z"), Next: at("2026-11-25T21:00:09Z"), MissedFrom: at("2026-11-25T21:00:00Z"), MissedTo: at("2026-11-25T21:00:08Z")}},
		{"down for a month", every, "2026-10-25T21:00:00Z", "2026-11-25T21:00:10Z", store.MissedRunOnce,
			schedule.Decision{Fire: true, Tick: at("2026-11-25T21:00:08Z"), Next: at("2026-11-25T21:00:09Z"), MissedFrom: at("2026-10-25T21:00:00Z"), MissedTo: at("2026-11-25T21:00:08Z")}},
		{"hourly, down for a day", hourly, "2026-11-24T21:00:00Z", "2026-11-25T21:30:00Z", store.MissedSkip,
			schedule.Decision{Next: at("2026-11-25T22:00:00Z"), MissedFrom: at("2026-11-24T21:00:00Z"), MissedTo: at("2026-11-25T21:00:00Z")}},
	}
	for _, c := range cases {
		got := schedule.Decide(c.spec, at(c.due), at(c.now), grace, c.policy)
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	now := at("2026-11-25T21:07:00Z")
	sc := &store.Schedule{ID: "nightly", Cron: "0 3 * * *", Zone: "Europe/Paris"}
	if field, err := schedule.Check(sc, now); err != nil {
		t.Fatalf("%s: %v", field, err)
	}
	if sc.Missed != store.MissedSkip || sc.Grace != schedule.DefaultGrace || !sc.Next.Equal(at("2026-11-26T02:00:00Z")) {
		t.Fatalf("defaults: %+v", sc)
	}
	for want, bad := range map[string]*store.Schedule{
		"id":       {ID: "no spaces", Cron: "* * * * *"},
		"cron":     {ID: "a", Cron: "every day"},
		"zone":     {ID: "a", Cron: "* * * * *", Zone: "Nowhere"},
		"missed":   {ID: "a", Cron: "* * * * *", Missed: "catch_up"},
		"grace_ms": {ID: "a", Cron: "* * * * *", Grace: time.Millisecond},
	} {
		if field, err := schedule.Check(bad, now); err == nil || field != want {
			t.Errorf("%+v: field %q, %v; want %q", bad, field, err, want)
		}
	}
	if _, err := schedule.Check(&store.Schedule{ID: "a", Cron: "0 0 30 2 *"}, now); err == nil {
		t.Error("a cron no date matches was taken")
	}
}
