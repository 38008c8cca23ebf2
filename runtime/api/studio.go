package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
)

// What the studio (the page `trellis studio` and `trellis serve` serve at
// /studio) asks of the API beyond the routes every client uses: signing
// in with a one-time token, a flow's files, checking edited files as the
// server would load them, saving them, and a node's prompt rendered over
// a thread's state.

// StudioSignIn exchanges the one-time token `trellis studio` printed for
// an API key.
type StudioSignIn struct {
	Token string `json:"token"`
}

// StudioSession is the key a one-time token was exchanged for: the
// page's credential from then on.
type StudioSession struct {
	// Key is the API key itself, given once, when a token is exchanged.
	Key    string `json:"key,omitempty"`
	KeyID  string `json:"key_id"`
	Tenant string `json:"tenant"`
	Admin  bool   `json:"admin"`
	// Scope is the key's ("studio" for one a token was exchanged for).
	Scope string `json:"scope,omitempty"`
	// Edits says whether the key may change the flows (save, reload).
	Edits bool `json:"edits"`
	// Expires is when the key stops working unless the page renews it
	// (POST /v1/studio/session/renew); none for a key that does not lapse.
	Expires *time.Time `json:"expires,omitempty"`
}

// FlowFile is one file a flow is compiled from: the flow file, a prompt,
// a schema, a subflow's file. Path is relative to the server's project
// root (FlowFiles.Root), as diagnostics name it.
type FlowFile struct {
	Path string `json:"path"`
	// Role is flow, prompt, schema or other.
	Role string `json:"role"`
	Text string `json:"text"`
	// Hash is the SHA-256 of Text, sent back as Base when saving so that a
	// file changed on the disk since is not overwritten.
	Hash string `json:"hash"`
}

// FlowFiles lists a flow's files, the flow file first.
type FlowFiles struct {
	Flow string `json:"flow"`
	// Root names the directory the paths are relative to (its name
	// alone: where it is on the server's disk is not told).
	Root string `json:"root"`
	// Writable says whether the server can save edits to the files; when
	// it cannot, ReadOnly says why.
	Writable bool       `json:"writable"`
	ReadOnly string     `json:"read_only,omitempty"`
	Files    []FlowFile `json:"files"`
}

// FileEdit is the new text of one of a flow's files; Base, when saving,
// is the hash of the text the edit started from.
type FileEdit struct {
	Path string `json:"path"`
	Text string `json:"text"`
	Base string `json:"base,omitempty"`
}

// FileEdits are edits to a flow's files, to check or to save.
type FileEdits struct {
	Files []FileEdit `json:"files"`
}

// FlowCheck is a flow checked with edits to its files: its diagnostics
// and, when it compiles, its graph (as GET /v1/flows/{name}/graph gives
// it) and run configuration.
type FlowCheck struct {
	Valid       bool              `json:"valid"`
	Diagnostics []diag.Diagnostic `json:"diagnostics"`
	Graph       json.RawMessage   `json:"graph,omitempty"`
	Config      []ConfigEntry     `json:"config,omitempty"`
}

// ConfigEntry is one entry of a flow's run configuration.
type ConfigEntry struct {
	Name    string          `json:"name"`
	Schema  json.RawMessage `json:"schema"`
	Secret  bool            `json:"secret,omitempty"`
	Default any             `json:"default,omitempty"`
}

// FlowSaved is the outcome of saving a flow's files: the files as now
// written and the flows as reloaded.
type FlowSaved struct {
	Files  []FlowFile `json:"files"`
	Flows  []Flow     `json:"flows"`
	Reload bool       `json:"reloaded"`
}

// PromptPreview is what a node would send to the model over a state.
type PromptPreview struct {
	Node  string `json:"node"`
	Title string `json:"title"`
	// Thread and Checkpoint name the state it was rendered over (none:
	// the flow's defaults).
	Thread     string          `json:"thread,omitempty"`
	Checkpoint uint64          `json:"checkpoint,omitempty"`
	Sections   []PromptSection `json:"sections"`
}

// PromptSection is one part of a prompt: a system or user message, the
// reply's schema.
type PromptSection struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// StudioSignIn exchanges a one-time studio token for a key (no key is
// needed to call it).
func (c *Client) StudioSignIn(ctx context.Context, token string) (*StudioSession, error) {
	var out StudioSession
	err := c.do(ctx, http.MethodPost, "/v1/studio/session", StudioSignIn{Token: token}, &out)
	return &out, err
}

// StudioSession describes the key the client calls with: its tenant and
// what it may do.
func (c *Client) StudioSession(ctx context.Context) (*StudioSession, error) {
	var out StudioSession
	err := c.do(ctx, http.MethodGet, "/v1/studio/session", nil, &out)
	return &out, err
}

// RenewStudioSession keeps a lapsing key working for another while, as a
// studio's page does while it is open.
func (c *Client) RenewStudioSession(ctx context.Context) (*StudioSession, error) {
	var out StudioSession
	err := c.do(ctx, http.MethodPost, "/v1/studio/session/renew", struct{}{}, &out)
	return &out, err
}

func flowPath(name, rest string) string { return "/v1/flows/" + url.PathEscape(name) + rest }

// FlowFiles returns the files a flow is compiled from.
func (c *Client) FlowFiles(ctx context.Context, name string) (*FlowFiles, error) {
	var out FlowFiles
	err := c.do(ctx, http.MethodGet, flowPath(name, "/files"), nil, &out)
	return &out, err
}

// CheckFlow checks a flow as it would load with edits to its files.
func (c *Client) CheckFlow(ctx context.Context, name string, edits []FileEdit) (*FlowCheck, error) {
	var out FlowCheck
	err := c.do(ctx, http.MethodPost, flowPath(name, "/check"), FileEdits{Files: edits}, &out)
	return &out, err
}

// SaveFlow writes edits to a flow's files and reloads the flows; a flow
// with errors is refused (invalid_flow, with the diagnostics) and nothing
// is written.
func (c *Client) SaveFlow(ctx context.Context, name string, edits []FileEdit) (*FlowSaved, error) {
	var out FlowSaved
	err := c.do(ctx, http.MethodPut, flowPath(name, "/files"), FileEdits{Files: edits}, &out)
	return &out, err
}

// PreviewPrompt renders a node's prompt over a thread's state (at a
// checkpoint when at > 0; over the flow's defaults when thread is "").
func (c *Client) PreviewPrompt(ctx context.Context, flow, node, thread string, at uint64) (*PromptPreview, error) {
	q := url.Values{}
	if thread != "" {
		q.Set("thread", thread)
	}
	if at > 0 {
		q.Set("at", strconv.FormatUint(at, 10))
	}
	path := flowPath(flow, "/nodes/"+url.PathEscape(node)+"/prompt")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out PromptPreview
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return &out, err
}

// StudioSignInResult is the outcome of a sign-in from the studio's form
// (POST /studio/signin): the session the token was exchanged for, or why
// it was not. The server hands it to the studio's page handler in the
// request's context, for the page it answers to carry.
type StudioSignInResult struct {
	Session *StudioSession
	Error   *Error
}

type studioSignInKey struct{}

// WithStudioSignIn is ctx carrying the outcome of a form sign-in.
func WithStudioSignIn(ctx context.Context, res StudioSignInResult) context.Context {
	return context.WithValue(ctx, studioSignInKey{}, res)
}

// StudioSignInFrom is the outcome of the form sign-in a request answers,
// if it answers one.
func StudioSignInFrom(ctx context.Context) (StudioSignInResult, bool) {
	res, ok := ctx.Value(studioSignInKey{}).(StudioSignInResult)
	return res, ok
}
