package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// CodeMoveRefused is a thread's move onto another version of its flow
// refused: the changes that break its state with no migration for them,
// or a migration that does not type-check (details: MoveRefusal).
const CodeMoveRefused Code = "move_refused"

// FlowVersion is one version of a flow the store keeps.
type FlowVersion struct {
	Version string    `json:"version"`
	Created time.Time `json:"created"`
	// Loaded is set for the version this server loaded from its flow
	// directory; Promoted for the one new threads start on, on every
	// server sharing the store.
	Loaded   bool `json:"loaded"`
	Promoted bool `json:"promoted"`
	// Threads counts the caller's threads on it.
	Threads int `json:"threads"`
}

// FlowVersions lists a flow's versions, the most recently kept first.
type FlowVersions struct {
	Flow     string        `json:"flow"`
	Versions []FlowVersion `json:"versions"`
}

// ThreadVersion is a thread and the version of its flow it runs.
type ThreadVersion struct {
	Thread  string    `json:"thread"`
	Version string    `json:"version"`
	Since   time.Time `json:"since"`
}

// ThreadVersions is a page of the threads on a version of a flow.
type ThreadVersions struct {
	Threads []ThreadVersion `json:"threads"`
	// Next is the after of the next page; empty on the last.
	Next string `json:"next,omitempty"`
}

// Migration gives the values a thread's state takes as it moves: an
// expression per field of the version moved to, over the thread's state
// as the version it leaves has it; Drop names fields that version no
// longer has.
type Migration struct {
	Set  map[string]string `json:"set,omitempty"`
	Drop []string          `json:"drop,omitempty"`
}

// MoveThread asks to move a thread onto another version of its flow.
type MoveThread struct {
	To        string     `json:"to"`
	Migration *Migration `json:"migration,omitempty"`
	// DryRun classifies the change and checks the migration only.
	DryRun bool `json:"dry_run,omitempty"`
}

// Effect is what one change between two versions means for a thread.
type Effect struct {
	Area     string `json:"area"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Breaking bool   `json:"breaking"`
	Reason   string `json:"reason"`
}

// Moved is a thread's move, or its dry run.
type Moved struct {
	Thread  string   `json:"thread"`
	Flow    string   `json:"flow"`
	From    string   `json:"from"`
	To      string   `json:"to"`
	Effects []Effect `json:"effects"`
	// Moved is set when the thread moved; Checkpoint is then the
	// move's, in the thread's history.
	Moved      bool   `json:"moved"`
	Checkpoint uint64 `json:"checkpoint,omitempty"`
}

// MoveRefusal is the details of move_refused.
type MoveRefusal struct {
	From     string   `json:"from"`
	To       string   `json:"to"`
	Breaking []Effect `json:"breaking"`
	Problems []string `json:"problems"`
}

// FlowVersions lists a flow's versions kept, with the caller's threads on
// each.
func (c *Client) FlowVersions(ctx context.Context, flow string) (*FlowVersions, error) {
	var out FlowVersions
	err := c.do(ctx, http.MethodGet, "/v1/flows/"+url.PathEscape(flow)+"/versions", nil, &out)
	return &out, err
}

// VersionThreads lists a page of the caller's threads on a version of a
// flow (after: "" for the first).
func (c *Client) VersionThreads(ctx context.Context, flow, version, after string) (*ThreadVersions, error) {
	var out ThreadVersions
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	err := c.do(ctx, http.MethodGet, "/v1/flows/"+url.PathEscape(flow)+"/versions/"+url.PathEscape(version)+"/threads?"+q.Encode(), nil, &out)
	return &out, err
}

// MoveThread moves a thread onto another version of its flow (or, with
// DryRun, says whether it could move); a refusal is an *Error with code
// move_refused whose Details are a MoveRefusal.
func (c *Client) MoveThread(ctx context.Context, id string, m MoveThread) (*Moved, error) {
	var out Moved
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(id)+"/migrate", m, &out)
	return &out, err
}

// Promoted is a flow's version promoted: the one its new threads start
// on, on every server sharing the store.
type Promoted struct {
	Flow    string `json:"flow"`
	Version string `json:"version"`
	// Previous is the version promoted before ("" for none).
	Previous string    `json:"previous,omitempty"`
	Since    time.Time `json:"since"`
	// By is who promoted it: an admin key's id, or the first load of the
	// flow by a server.
	By string `json:"by"`
}

// PromoteVersion makes a version of a flow the one its new threads start
// on, on every server sharing the store (an admin key).
func (c *Client) PromoteVersion(ctx context.Context, flow, version string) (*Promoted, error) {
	var out Promoted
	err := c.do(ctx, http.MethodPost, "/v1/flows/"+url.PathEscape(flow)+"/versions/"+url.PathEscape(version)+"/promote", nil, &out)
	return &out, err
}
