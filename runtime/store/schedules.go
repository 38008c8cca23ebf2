package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Schedules keeps the schedules that start runs at the times of a cron
// expression: on one thread, or on a new thread each time. Every server
// sharing the store looks for due schedules; a tick's run is named after
// the schedule and the tick, so of the servers that fire one tick only
// one queues its run (the others find it exists), and the schedule's
// next tick moves forward by compare-and-set. The built-in stores
// implement it, and storetest.RunSchedules is its conformance suite.
//
// A schedule bound to a thread is deleted with the thread.
type Schedules interface {
	// CreateSchedule records a schedule; ErrExists when one with its id
	// exists, ErrScheduleLimit when limit > 0 and its tenant has limit
	// schedules already. The count and the insert are one transaction,
	// serialised per tenant: creates at once never take a tenant past
	// limit.
	CreateSchedule(ctx context.Context, s *Schedule, limit int) error
	// Schedule returns a tenant's schedule; ErrNotFound when there is
	// none.
	Schedule(ctx context.Context, tenant, id string) (*Schedule, error)
	// ListSchedules lists a tenant's schedules by id, a page at a time
	// (see ScheduleQuery).
	ListSchedules(ctx context.Context, q ScheduleQuery) ([]*Schedule, error)
	// DueSchedules lists the schedules, of every tenant, not paused whose
	// next tick is at or before now, the longest due first, at most
	// limit (see MaxPage).
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]*Schedule, error)
	// AdvanceSchedule records a schedule's fired (or skipped) tick and
	// its next one, if its next tick is still from: ErrClaimLost when
	// another moved it first, ErrNotFound when the schedule is gone.
	// t.History goes on the schedule's tick history (its newest first),
	// which keeps the last TickHistory.
	AdvanceSchedule(ctx context.Context, id string, from time.Time, t ScheduleTick) error
	// PauseSchedule pauses a tenant's schedule, or resumes it with its
	// next tick at next, and returns it.
	PauseSchedule(ctx context.Context, tenant, id string, paused bool, next time.Time) (*Schedule, error)
	// DeleteSchedule deletes a tenant's schedule; ErrNotFound when there
	// is none.
	DeleteSchedule(ctx context.Context, tenant, id string) error
}

// ErrScheduleLimit is CreateSchedule's error when the tenant has as many
// schedules as it may.
var ErrScheduleLimit = errors.New("the tenant has as many schedules as it may")

// Schedule starts runs at the times of a cron expression.
type Schedule struct {
	ID     string
	Tenant string
	// Flow is the flow a new thread runs; Thread, when set, is the thread
	// (its store key) every tick's run goes to instead.
	Flow, Thread string
	// Cron is the expression, Zone the IANA time zone it is read in.
	Cron, Zone string
	// Input is the runs' input; Values and Metadata are the new threads'
	// initial values and metadata.
	Input, Values json.RawMessage
	Metadata      map[string]string
	// Missed says what happens to ticks more than Grace late (missed
	// while no server ran): skipped, or run once for all of them.
	Missed MissedPolicy
	Grace  time.Duration
	// Webhook is where each run's end is posted ("" for none).
	Webhook string
	Paused  bool
	// Next is the next tick.
	Next time.Time
	// LastTick, LastRun and LastError are of the tick fired last.
	LastTick  time.Time
	LastRun   string
	LastError string
	Created   time.Time
	// Ticks is what the last ticks did, the newest first, at most
	// TickHistory of them.
	Ticks []TickRecord
}

// TickHistory is how many ticks a schedule's history keeps.
const TickHistory = 50

// TickRecord is what one tick of a schedule did (or a span of ticks
// missed while no server ran).
type TickRecord struct {
	// Tick is the tick's time (for missed ticks, the last of them); At is
	// when a server handled it.
	Tick time.Time `json:"tick"`
	At   time.Time `json:"at"`
	// Status says what it did: TickStarted (its run, Run, was started),
	// TickMissed (MissedFrom to MissedTo passed while no server ran, and
	// the schedule's Missed policy was applied: Error says how) or
	// TickFailed (Error says why no run started).
	Status     TickStatus `json:"status"`
	Run        string     `json:"run,omitempty"`
	Error      string     `json:"error,omitempty"`
	MissedFrom time.Time  `json:"missed_from,omitzero"`
	MissedTo   time.Time  `json:"missed_to,omitzero"`
}

// TickStatus is what a tick did.
type TickStatus string

// The statuses of a tick.
const (
	TickStarted TickStatus = "started"
	TickMissed  TickStatus = "missed"
	TickFailed  TickStatus = "failed"
)

// AddTicks puts records (the newest last) on a tick history (the newest
// first), keeping TickHistory.
func AddTicks(history, records []TickRecord) []TickRecord {
	out := make([]TickRecord, 0, min(len(history)+len(records), TickHistory))
	for i := len(records) - 1; i >= 0 && len(out) < TickHistory; i-- {
		out = append(out, records[i])
	}
	for _, r := range history {
		if len(out) == TickHistory {
			break
		}
		out = append(out, r)
	}
	return out
}

// MissedPolicy is what a schedule does with the ticks it missed.
type MissedPolicy string

// The missed-tick policies.
const (
	MissedSkip    MissedPolicy = "skip"
	MissedRunOnce MissedPolicy = "run_once"
)

// ScheduleTick is what AdvanceSchedule records.
type ScheduleTick struct {
	Next      time.Time
	LastTick  time.Time
	LastRun   string
	LastError string
	// History is what this advance did, for the tick history, in the
	// order it happened.
	History []TickRecord
}

// ScheduleQuery pages ListSchedules.
type ScheduleQuery struct {
	Tenant string
	// Thread keeps only the schedules of that thread (its store key).
	Thread string
	// After continues a listing after this schedule id.
	After string
	Limit int
}

// SchedulesOf returns st's Schedules.
func SchedulesOf(st Store) (Schedules, bool) {
	s, ok := st.(Schedules)
	return s, ok
}
