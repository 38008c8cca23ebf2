// Package schedule reads cron schedules and decides, for a schedule that
// is due, which tick fires and which comes next. The store keeps the
// schedules (store.Schedules); a server firing a tick starts its run
// under an id made of the schedule's and the tick's, so that of the
// servers that fire one tick only one run is queued, and moves the
// schedule's next tick by compare-and-set.
//
// A cron expression has the five standard fields (minute, hour, day of
// month, month, day of week), or six with a seconds field first (for
// schedules finer than a minute), or is a descriptor (@hourly, @daily,
// @weekly, @monthly, @yearly, @every DURATION); robfig/cron reads them.
// The time zone is a field of its own (an IANA name), not a CRON_TZ
// prefix, and daylight saving moves ticks as robfig/cron does: a time
// skipped by a change does not fire, one repeated fires once.
package schedule

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/trellisflow/trellis/runtime/store"
)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression in its time zone.
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
}

// Parse reads a cron expression in a time zone ("": UTC).
func Parse(expr, zone string) (*Spec, error) {
	if zone == "" {
		zone = "UTC"
	}
	if strings.HasPrefix(strings.TrimSpace(expr), "CRON_TZ=") || strings.HasPrefix(strings.TrimSpace(expr), "TZ=") {
		return nil, fmt.Errorf("cron %q: give the time zone as the schedule's zone, not in the expression", expr)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("time zone %q: %w", zone, err)
	}
	if d, ok := strings.CutPrefix(strings.TrimSpace(expr), "@every "); ok {
		// robfig/cron would round a part of a second down, and a delay
		// under a second up to one: say so instead
		if every, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && (every < time.Second || every%time.Second != 0) {
			return nil, fmt.Errorf("cron %q: @every takes whole seconds, at least 1s (ticks are seconds apart)", expr)
		}
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w (five fields: minute hour day-of-month month day-of-week, six with seconds first, or @hourly, @daily, @every 1h...)", expr, err)
	}
	return &Spec{sched: sched, loc: loc}, nil
}

// Next is the first tick after t, in UTC; zero when there is none (an
// expression no date matches, such as February 30th).
func (s *Spec) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Shortest is the shortest time between two of the n ticks after from
// (zero when there are fewer than two): how often the schedule fires at
// its most frequent.
func (s *Spec) Shortest(from time.Time, n int) time.Duration {
	var out time.Duration
	prev := s.Next(from)
	for range n - 1 {
		if prev.IsZero() {
			break
		}
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		if gap := next.Sub(prev); out == 0 || gap < out {
			out = gap
		}
		prev = next
	}
	return out
}

// Decision is what a due schedule does now.
type Decision struct {
	// Fire says whether Tick fires (starts a run).
	Fire bool
	Tick time.Time
	// Next is the schedule's next tick (zero: none ever).
	Next time.Time
	// Missed is the first and last of the ticks missed (more than the
	// grace late) that the decision gives up or runs once for (zero: none).
	MissedFrom, MissedTo time.Time
}

// Decide decides for a schedule whose next tick, due, has come by now: a
// tick at most grace late fires; ticks later than that were missed (no
// server ran then) and, as policy says, are skipped or run once for all
// of them (as the latest of them). The tick after those decided on is
// the next, due at once when it has come already.
func Decide(s *Spec, due, now time.Time, grace time.Duration, policy store.MissedPolicy) Decision {
	if now.Sub(due) <= grace {
		return Decision{Fire: true, Tick: due, Next: s.Next(due)}
	}
	last := s.latest(due, now.Add(-grace))
	d := Decision{Next: s.Next(last), MissedFrom: due, MissedTo: last}
	if policy == store.MissedRunOnce {
		d.Fire, d.Tick = true, last
	}
	return d
}

// latest is the latest tick at or before x, due being a tick at or
// before x: it looks in windows before x that double until one holds a
// tick, so that a schedule down for long costs a few steps, not one per
// tick missed.
func (s *Spec) latest(due, x time.Time) time.Time {
	for w := time.Minute; ; w *= 2 {
		start := x.Add(-w)
		t := due
		if start.After(due) {
			t = s.Next(start.Add(-time.Nanosecond))
			if t.IsZero() || t.After(x) {
				continue
			}
		}
		for n := s.Next(t); !n.IsZero() && !n.After(x); n = s.Next(n) {
			t = n
		}
		return t
	}
}

// Missed policies a schedule may declare.
var missedPolicies = []store.MissedPolicy{store.MissedSkip, store.MissedRunOnce}

// idFormat is what a schedule's id may be, as a thread's.
var idFormat = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// DefaultGrace is how late a tick may fire before it counts as missed.
const DefaultGrace = 10 * time.Second

// Check checks a new schedule's fields, fills its defaults (zone UTC,
// missed skip, grace DefaultGrace) and sets its first tick after now;
// the error names the field at fault.
func Check(sc *store.Schedule, now time.Time) (field string, err error) {
	if !idFormat.MatchString(sc.ID) {
		return "id", fmt.Errorf("schedule id %q: 1 to 128 letters, digits, '.', '_', ':' or '-'", sc.ID)
	}
	if sc.Zone == "" {
		sc.Zone = "UTC"
	}
	spec, err := Parse(sc.Cron, sc.Zone)
	if err != nil {
		if strings.HasPrefix(err.Error(), "time zone") {
			return "zone", err
		}
		return "cron", err
	}
	if sc.Missed == "" {
		sc.Missed = store.MissedSkip
	}
	ok := false
	for _, p := range missedPolicies {
		ok = ok || sc.Missed == p
	}
	if !ok {
		return "missed", fmt.Errorf("missed %q: skip or run_once", sc.Missed)
	}
	if sc.Grace == 0 {
		sc.Grace = DefaultGrace
	}
	if sc.Grace < time.Second || sc.Grace > 24*time.Hour {
		return "grace_ms", fmt.Errorf("grace %v: from 1s to 24h", sc.Grace)
	}
	sc.Next = spec.Next(now)
	if sc.Next.IsZero() {
		return "cron", fmt.Errorf("cron %q: no time matches it", sc.Cron)
	}
	return "", nil
}
