package api

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// WebhookEvent is the body of a webhook: a run's end. Type is
// run.succeeded, run.failed or run.cancelled; Data the run as GET
// /v1/threads/{id}/runs/{run} answers.
type WebhookEvent struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Run       `json:"data"`
}

// Delivery is the webhook of one run: where it goes, where it stands
// (pending, delivered or failed) and each attempt made.
type Delivery struct {
	ID       string    `json:"id"`
	Run      string    `json:"run"`
	URL      string    `json:"url"`
	Status   string    `json:"status"`
	Attempts []Attempt `json:"attempts"`
	// Next is when the next attempt is due (pending only).
	Next    *time.Time `json:"next,omitempty"`
	Created time.Time  `json:"created"`
}

// Attempt is one attempt to deliver a webhook: the receiver's HTTP
// status (0: no answer) and why it failed.
type Attempt struct {
	N      int       `json:"n"`
	At     time.Time `json:"at"`
	Server string    `json:"server"`
	Status int       `json:"status"`
	Error  string    `json:"error,omitempty"`
	TookMS int64     `json:"took_ms"`
}

// Deliveries lists a run's webhook deliveries.
type Deliveries struct {
	Deliveries []Delivery `json:"deliveries"`
}

// Schedule starts runs at the times of a cron expression: on one thread,
// or on a new thread of its flow each time.
type Schedule struct {
	ID string `json:"id"`
	// Flow is the flow the runs run; Thread, when set, the thread every
	// run goes to (else each tick starts a new thread, named after the
	// schedule and the tick).
	Flow   string `json:"flow"`
	Thread string `json:"thread,omitempty"`
	// Cron is five fields (minute hour day-of-month month day-of-week),
	// or six with seconds first, or a descriptor such as @hourly; Zone
	// the IANA time zone it is read in.
	Cron string `json:"cron"`
	Zone string `json:"zone"`
	// Input is each run's input; Values and Metadata each new thread's
	// initial values and metadata (a schedule of a thread takes neither).
	Input    map[string]any    `json:"input,omitempty"`
	Values   map[string]any    `json:"values,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Missed is what becomes of ticks missed by more than Grace (while no
	// server ran): skip them, or run_once for all of them.
	Missed  string `json:"missed"`
	GraceMS int64  `json:"grace_ms"`
	// Webhook is where each run's end is posted.
	Webhook string `json:"webhook,omitempty"`
	Paused  bool   `json:"paused"`
	// Next is the next tick (none while paused).
	Next *time.Time `json:"next,omitempty"`
	// LastTick, LastRun and LastError are of the last tick fired.
	LastTick  *time.Time `json:"last_tick,omitempty"`
	LastRun   string     `json:"last_run,omitempty"`
	LastError string     `json:"last_error,omitempty"`
	Created   time.Time  `json:"created"`
}

// CreateSchedule creates a schedule (ID empty: one is made).
type CreateSchedule struct {
	ID       string            `json:"id,omitempty"`
	Flow     string            `json:"flow,omitempty"`
	Thread   string            `json:"thread,omitempty"`
	Cron     string            `json:"cron"`
	Zone     string            `json:"zone,omitempty"`
	Input    map[string]any    `json:"input,omitempty"`
	Values   map[string]any    `json:"values,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Missed   string            `json:"missed,omitempty"`
	// GraceMS is from 1000 to 86400000 (none: 10000).
	GraceMS *int64 `json:"grace_ms,omitempty"`
	Webhook string `json:"webhook,omitempty"`
	Paused  bool   `json:"paused,omitempty"`
}

// Schedules is a page of schedules, by id.
type Schedules struct {
	Schedules []Schedule `json:"schedules"`
	// Next continues the listing (after=Next), when there may be more.
	Next string `json:"next,omitempty"`
}

// Deliveries lists the webhook deliveries of a run, with their attempts.
func (c *Client) Deliveries(ctx context.Context, thread, run string) (*Deliveries, error) {
	var out Deliveries
	err := c.do(ctx, "GET", "/v1/threads/"+url.PathEscape(thread)+"/runs/"+url.PathEscape(run)+"/webhooks", nil, &out)
	return &out, err
}

// CreateSchedule creates a schedule.
func (c *Client) CreateSchedule(ctx context.Context, s CreateSchedule) (*Schedule, error) {
	var out Schedule
	err := c.do(ctx, "POST", "/v1/schedules", s, &out)
	return &out, err
}

// Schedule returns a schedule.
func (c *Client) Schedule(ctx context.Context, id string) (*Schedule, error) {
	var out Schedule
	err := c.do(ctx, "GET", "/v1/schedules/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// Schedules lists the schedules, a page at a time (after: the Next of
// the previous page).
func (c *Client) Schedules(ctx context.Context, after string, limit int) (*Schedules, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/schedules"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out Schedules
	err := c.do(ctx, "GET", path, nil, &out)
	return &out, err
}

// PauseSchedule pauses a schedule (paused true) or resumes it.
func (c *Client) PauseSchedule(ctx context.Context, id string, paused bool) (*Schedule, error) {
	action := "/pause"
	if !paused {
		action = "/resume"
	}
	var out Schedule
	err := c.do(ctx, "POST", "/v1/schedules/"+url.PathEscape(id)+action, nil, &out)
	return &out, err
}

// DeleteSchedule deletes a schedule.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/schedules/"+url.PathEscape(id), nil, nil)
}

// ScheduleTick is what one tick of a schedule did.
type ScheduleTick struct {
	// Tick is the tick's time (for missed ticks, the last of them); At is
	// when a server handled it.
	Tick time.Time `json:"tick"`
	At   time.Time `json:"at"`
	// Status is started (Run was started, on Thread; RunStatus is where
	// it stands now, while its record is kept), missed (MissedFrom to
	// MissedTo passed while no server ran; Error says what the schedule's
	// missed policy did) or failed (Error says why no run started).
	Status     string     `json:"status"`
	Run        string     `json:"run,omitempty"`
	Thread     string     `json:"thread,omitempty"`
	RunStatus  string     `json:"run_status,omitempty"`
	Error      string     `json:"error,omitempty"`
	MissedFrom *time.Time `json:"missed_from,omitempty"`
	MissedTo   *time.Time `json:"missed_to,omitempty"`
}

// ScheduleTicks is what a schedule's last ticks did, the newest first.
type ScheduleTicks struct {
	Schedule string         `json:"schedule"`
	Ticks    []ScheduleTick `json:"ticks"`
}

// ScheduleTicks lists what a schedule's last ticks did, the newest first.
func (c *Client) ScheduleTicks(ctx context.Context, id string) (*ScheduleTicks, error) {
	var out ScheduleTicks
	err := c.do(ctx, "GET", "/v1/schedules/"+url.PathEscape(id)+"/ticks", nil, &out)
	return &out, err
}
