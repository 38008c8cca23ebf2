// Package api is the Trellis HTTP API as Go types, and a typed client for
// it (Client). The server is package runtime/api/server, which `trellis
// serve` serves; schemas/openapi.yaml is the reference of its routes.
//
// Every error is one JSON shape, {"error": {"code", "message",
// "details"}}, with a stable code (the Code constants) and an HTTP status
// that follows from it.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/engine"
)

// Code is a stable error code.
type Code string

// The error codes, with the status each is sent with.
const (
	CodeBadRequest         Code = "bad_request"            // 400: the body is not the JSON the route takes
	CodeUnauthorized       Code = "unauthorized"           // 401: no key, or a key that is not valid
	CodeForbidden          Code = "forbidden"              // 403: the key may not do this (an admin route)
	CodeNotFound           Code = "not_found"              // 404: no such flow, thread, run or key for this tenant
	CodeMethodNotAllowed   Code = "method_not_allowed"     // 405
	CodeThreadExists       Code = "thread_exists"          // 409: a thread with that id exists
	CodeScheduleExists     Code = "schedule_exists"        // 409: a schedule with that id exists
	CodeThreadBusy         Code = "thread_busy"            // 409: another run holds the thread
	CodeVoiceBusy          Code = "voice_busy"             // 409: another caller holds the thread's voice session
	CodeUnfinished         Code = "thread_unfinished"      // 409: the thread's last run stopped part way
	CodeTooLarge           Code = "body_too_large"         // 413
	CodeUnsupportedMedia   Code = "unsupported_media_type" // 415
	CodeInvalidInput       Code = "invalid_input"          // 422: values or input the flow refuses
	CodeInvalidFlow        Code = "invalid_flow"           // 422: a flow with errors (details: the diagnostics)
	CodeUnavailable        Code = "unavailable"            // 503: the store does not answer, or the server is stopping
	CodeRunRequeued        Code = "run_requeued"           // 503: the server stopped before the run ended and queued it again (details: run, thread, status)
	CodeNotConversational  Code = "not_conversational"     // 422: a voice session for a flow with no conversation block
	CodeVoiceNotConfigured Code = "voice_not_configured"   // 503: the server has no LiveKit server to talk to
	CodeSpeechUnavailable  Code = "speech_unavailable"     // 503: the offline speech engine is not installed
	CodeLiveKitFailed      Code = "livekit_failed"         // 502: the LiveKit server refused or did not answer
	CodeReadOnly           Code = "flows_read_only"        // 409: the server cannot write its flows' files
	CodeFileChanged        Code = "file_changed"           // 409: a file changed on the disk since the edit began
	CodeLimitReached       Code = "limit_reached"          // 409: a tenant has as many of something as the server keeps (details: what, limit)
	CodeEvalRunning        Code = "eval_running"           // 409: the eval has not ended
	CodeStoreFull          Code = "store_full"             // 507: the store's disk is full; nothing of the request was recorded
	CodeInternal           Code = "internal"               // 500
)

// Status is the HTTP status a code is sent with.
func (c Code) Status() int {
	if status, ok := requestStatus[c]; ok {
		return status
	}
	switch c {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeThreadExists, CodeScheduleExists, CodeThreadBusy, CodeUnfinished, CodeVoiceBusy, CodeReadOnly, CodeFileChanged, CodeMoveRefused, CodeLimitReached, CodeEvalRunning:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case CodeInvalidInput, CodeInvalidFlow, CodeNotConversational:
		return http.StatusUnprocessableEntity
	case CodeUnavailable, CodeRunRequeued, CodeVoiceNotConfigured, CodeSpeechUnavailable:
		return http.StatusServiceUnavailable
	case CodeLiveKitFailed:
		return http.StatusBadGateway
	case CodeStoreFull:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// Error is the error every route answers with.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details,omitempty"`
	// Status is the HTTP status it came with (set by the client).
	Status int `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// ErrorBody is an error response's body.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Flow is a loaded flow.
type Flow struct {
	Name string `json:"name"`
	// Version changes whenever the flow file or a file it reads changes:
	// the version this server loaded from its flow directory. Promoted is
	// the one new threads start on, on every server sharing the store
	// (empty: the store keeps no versions).
	Version      string        `json:"version"`
	Promoted     string        `json:"promoted,omitempty"`
	Description  string        `json:"description,omitempty"`
	Path         string        `json:"path"`
	Inputs       []string      `json:"inputs"`
	Conversation *Conversation `json:"conversation,omitempty"`
	// The state's and the input's JSON Schemas and the flow file's text,
	// on a single flow's page.
	StateSchema json.RawMessage `json:"state_schema,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Source      string          `json:"source,omitempty"`
}

// Conversation is a conversational flow's declaration.
type Conversation struct {
	Input       string            `json:"input"`
	Output      string            `json:"output"`
	Attachments map[string]string `json:"attachments,omitempty"`
}

// FlowList lists the loaded flows.
type FlowList struct {
	Flows []Flow `json:"flows"`
}

// Validation is the outcome of validating a flow.
type Validation struct {
	Valid       bool              `json:"valid"`
	Diagnostics []diag.Diagnostic `json:"diagnostics"`
}

// Reload is the outcome of reloading the flows.
type Reload struct {
	Flows []Flow `json:"flows"`
}

// CreateThread starts a thread.
type CreateThread struct {
	// ID names the thread (default: a new id).
	ID   string `json:"id,omitempty"`
	Flow string `json:"flow"`
	// Values are the thread's initial values, over the schema's defaults.
	Values   map[string]any    `json:"values,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Thread statuses.
const (
	ThreadIdle       = "idle"
	ThreadUnfinished = "unfinished"
)

// Thread is a thread.
type Thread struct {
	ID       string            `json:"id"`
	Flow     string            `json:"flow"`
	Metadata map[string]string `json:"metadata"`
	Created  time.Time         `json:"created"`
	// Checkpoint is the thread's newest checkpoint; Status is idle, or
	// unfinished when its last run stopped with nodes still to run.
	Checkpoint uint64 `json:"checkpoint"`
	Status     string `json:"status"`
	// Version is the version of its flow the thread is pinned to: the one
	// its runs run until it is moved (POST /v1/threads/{id}/migrate).
	// Absent on a store that keeps no versions, and on a thread made
	// before versions were kept until its next run pins it to the
	// version loaded then.
	Version string `json:"version,omitempty"`
}

// ThreadList is a page of threads; Next, when set, is the cursor of the
// next page.
type ThreadList struct {
	Threads []Thread `json:"threads"`
	Next    string   `json:"next,omitempty"`
}

// State is a thread's state at a checkpoint.
type State struct {
	Thread     string         `json:"thread"`
	Checkpoint uint64         `json:"checkpoint"`
	Values     map[string]any `json:"values"`
	// Next lists the nodes an unfinished run would run next.
	Next []string `json:"next,omitempty"`
	Run  string   `json:"run,omitempty"`
	Step int      `json:"step"`
	// Interrupts are the questions the unfinished run waits on (its
	// interrupt nodes'), answered by a run with resume and answers.
	Interrupts []Interrupt `json:"interrupts,omitempty"`
	// Finished is set when the flow's conversation.until holds: the
	// conversation is over.
	Finished bool `json:"finished,omitempty"`
}

// Interrupt is a question a paused run asks: its id (what the answer is
// given by), its path (where it was asked: node names from the top,
// review/approve, items[2]/approve; an answer may name it too) and what
// it asks (any JSON value). At the top of a flow both are the asking
// node's name; inside a subflow or a map's item, at any depth, the id
// holds the child flows' namespaces (review:7|approve), unique however
// many items ask the same.
type Interrupt struct {
	ID      string `json:"id"`
	Path    string `json:"path"`
	Payload any    `json:"payload"`
}

// Checkpoint is one step of a thread's history.
type Checkpoint struct {
	Seq     uint64    `json:"seq"`
	Parent  uint64    `json:"parent"`
	Run     string    `json:"run,omitempty"`
	Step    int       `json:"step"`
	Source  string    `json:"source"`
	Time    time.Time `json:"time"`
	Writes  []Write   `json:"writes"`
	Writers []Writer  `json:"writers,omitempty"`
	Next    []string  `json:"next,omitempty"`
	// Move is set on a thread's move onto another version of its flow
	// (source migrate): the versions it left and moved to.
	Move *CheckpointMove `json:"move,omitempty"`
	// Base, for a branch (an update at an older checkpoint), is the
	// checkpoint whose state it goes on from: Parent is the head it was
	// committed after.
	Base uint64 `json:"base,omitempty"`
	// Answers are the answers the step's asking nodes ran with; Replies
	// what its nodes were told by a model (a replay tells them again).
	Answers map[string]any `json:"answers,omitempty"`
	Replies []Reply        `json:"replies,omitempty"`
}

// CheckpointMove is the versions a move's checkpoint records.
type CheckpointMove struct {
	Flow string `json:"flow"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Reply is a model's reply a node was told: Key names the request (a
// hash of what the node sent).
type Reply struct {
	Node string `json:"node"`
	Key  string `json:"key"`
	Text string `json:"text"`
}

// Write is one field a checkpoint changed: its new value, or for an
// append field the items appended.
type Write struct {
	Field   string `json:"field"`
	Version uint64 `json:"version"`
	Value   any    `json:"value,omitempty"`
	Items   []any  `json:"items,omitempty"`
	Append  bool   `json:"append,omitempty"`
	// Removed: the write took the field out of the state (a move onto a
	// version that has no such field).
	Removed bool `json:"removed,omitempty"`
}

// Writer is a node that ran in a step and the fields it wrote.
type Writer struct {
	Node   string   `json:"node"`
	Fields []string `json:"fields"`
}

// History is a page of a thread's checkpoints, newest first.
type History struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Fork starts a thread from another's checkpoint.
type Fork struct {
	// At is the checkpoint to fork from; ID names the new thread (default:
	// a new id).
	At       uint64            `json:"at"`
	ID       string            `json:"id,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Update writes values to a thread as if node As had, over the state of
// checkpoint At (default: the newest): at an older checkpoint, a branch
// that goes on from there, keeping its unfinished run (resume continues
// it over the edit). At a finished checkpoint, what As's edges trigger
// over the edited state is next, and resume runs it.
type Update struct {
	As     string         `json:"as"`
	Values map[string]any `json:"values"`
	At     uint64         `json:"at,omitempty"`
}

// Replay re-runs a thread from checkpoint At: a new thread (ID, default a
// new id) forked there, whose unfinished run, if any, starts at once.
// Replies "recorded" (the default) tells its nodes what the model told the
// thread (no model is needed to reproduce it); "model" asks the model.
type Replay struct {
	At       uint64            `json:"at"`
	ID       string            `json:"id,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Replies  string            `json:"replies,omitempty"`
}

// Replayed is a replay's new thread and the run that replays it (none
// when the checkpoint had nothing left to run).
type Replayed struct {
	Thread Thread `json:"thread"`
	Run    *Run   `json:"run,omitempty"`
}

// MakeFlowTest asks for a flow test made of a thread (see FlowTest); Save
// writes it beside the flow (it takes a key that may change the flows),
// Replace over a file of that name.
type MakeFlowTest struct {
	Save    bool `json:"save,omitempty"`
	Replace bool `json:"replace,omitempty"`
}

// FlowTest is a flow test made of a thread: a test file that creates a
// thread with its initial values, runs what it ran (corrections
// included) and expects each run's path and the final state, and the
// cassette of the model's replies it was told, so that it runs offline.
// It was run as made: Passed says so; Unasserted names the fields it
// leaves out, which came out otherwise (the time, a random id).
type FlowTest struct {
	Path         string   `json:"path"`
	Text         string   `json:"text"`
	CassettePath string   `json:"cassette_path,omitempty"`
	Cassette     string   `json:"cassette,omitempty"`
	Unasserted   []string `json:"unasserted,omitempty"`
	Passed       bool     `json:"passed"`
	Saved        bool     `json:"saved"`
}

// What a run does when its thread is busy with another.
const (
	// OnBusyReject fails the new run with thread_busy (the default).
	OnBusyReject = "reject"
	// OnBusyEnqueue runs it once the thread is free.
	OnBusyEnqueue = "enqueue"
	// OnBusyInterrupt stops the running one at its next step boundary,
	// gives up what it left unfinished, then runs the new one.
	OnBusyInterrupt = "interrupt"
)

// StartRun starts a run on a thread.
type StartRun struct {
	// Input sets the flow's input fields; anything else is refused.
	Input  map[string]any `json:"input,omitempty"`
	OnBusy string         `json:"on_busy,omitempty"`
	// Resume continues the thread's unfinished run instead (no input).
	Resume bool `json:"resume,omitempty"`
	// Answers answer the questions the unfinished run waits on
	// (State.Interrupts), each by its id or its path, at any depth; they
	// go with resume. Questions left unanswered are asked again; what
	// the answered ones complete is kept.
	Answers map[string]any `json:"answers,omitempty"`
	// Config sets the run's configuration (the flow's config block).
	// Values the flow marks secret are never written anywhere: only this
	// server has them, so a run another server executes (queued behind
	// others, or taken over after this server died) runs without them.
	Config map[string]any `json:"config,omitempty"`
	// Webhook is where the run's end is posted, signed (see
	// WebhookEvent); the server's allow-list must permit it. Empty: the
	// webhook the server sets for the thread's flow, if any.
	Webhook string `json:"webhook,omitempty"`
}

// RunRequeued is the event that ends a run's stream when its server
// stopped before the run ended (status queued): the run resumes on
// another server, or on this one once it restarts, and its events go on
// from there. A client continues the stream with Last-Event-ID, from any
// server.
const RunRequeued engine.EventType = "run_requeued"

// Run statuses.
const (
	RunQueued    = "queued"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// Run is a run started through the API.
type Run struct {
	ID          string         `json:"id"`
	Thread      string         `json:"thread"`
	Flow        string         `json:"flow"`
	FlowVersion string         `json:"flow_version"`
	Status      string         `json:"status"`
	Input       map[string]any `json:"input,omitempty"`
	// Answers are those a resuming run brought to the thread's questions.
	Answers map[string]any `json:"answers,omitempty"`
	// Config is the run's configuration, without its secret values.
	Config map[string]any `json:"config,omitempty"`
	// Error is why a run failed (or was cancelled).
	Error string `json:"error,omitempty"`
	// Checkpoint is the thread's checkpoint when the run ended.
	Checkpoint uint64     `json:"checkpoint,omitempty"`
	Created    time.Time  `json:"created"`
	Started    *time.Time `json:"started,omitempty"`
	Finished   *time.Time `json:"finished,omitempty"`
	// State is the thread's state after a finished run (on wait).
	State map[string]any `json:"state,omitempty"`
	// Output is a finished run's result as its flow declares it (the
	// flow's output block, rendered over the final state): set on a wait
	// and on reading the run (not in a thread's list of runs) when the run
	// succeeded and reached its end, with the flow at the version that
	// ran it.
	Output string `json:"output,omitempty"`
}

// Done reports whether the run has ended.
func (r *Run) Done() bool {
	return r.Status == RunSucceeded || r.Status == RunFailed || r.Status == RunCancelled
}

// RunList lists a thread's runs, newest first.
type RunList struct {
	Runs []Run `json:"runs"`
	// Next is the cursor of the next page (older runs): give it as
	// RunQuery.Before.
	Next string `json:"next,omitempty"`
}

// RunQuery pages a thread's runs, newest first.
type RunQuery struct {
	// Before continues a listing after this run (a list's Next).
	Before string
	// Limit bounds the page (1 to 500; 0: 100).
	Limit int
}

// CreateKey creates an API key.
type CreateKey struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name,omitempty"`
	Admin  bool   `json:"admin,omitempty"`
}

// Key is an API key. Secret, the key itself, is given once, when it is
// created; the server keeps only its hash.
type Key struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Name   string `json:"name,omitempty"`
	Admin  bool   `json:"admin"`
	// Scope narrows what the key may do: "studio" for the key a studio
	// signs its page in with (its tenant and the flows, no keys).
	Scope   string     `json:"scope,omitempty"`
	Created time.Time  `json:"created"`
	Revoked *time.Time `json:"revoked,omitempty"`
	// Expires is when a key that lapses stops working unless renewed.
	Expires *time.Time `json:"expires,omitempty"`
	Secret  string     `json:"secret,omitempty"`
}

// KeyList lists keys.
type KeyList struct {
	Keys []Key `json:"keys"`
}

// Health is the body of /healthz and /readyz.
type Health struct {
	// Status is "ok"; "degraded" when the server is ready but voice is
	// not; "unavailable" or "stopping" when it is not ready.
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Voice, on a server with a LiveKit server configured, is "ok" or
	// "unavailable", with VoiceError saying why.
	Voice      string `json:"voice,omitempty"`
	VoiceError string `json:"voice_error,omitempty"`
}

// Voice session modes.
const (
	// VoiceAudio: the caller speaks and hears the agent (the default).
	VoiceAudio = "audio"
	// VoiceText: the caller and the agent exchange text as data messages,
	// where no speech engine is at hand.
	VoiceText = "text"
)

// VoiceRequest asks for a thread's voice session.
type VoiceRequest struct {
	// Identity names the caller in the room (default "caller-" and the
	// id of the API key that asks); Name is shown to the others. An
	// identity belongs to the key that received it: asking with another
	// key for one that key holds (in the room, or in the session's caller
	// place), or for another key's default, is refused (CodeForbidden). A
	// session takes one caller at a time: another identity is refused
	// (CodeVoiceBusy) while a caller is in the room, or was given a token
	// moments ago and may be joining.
	Identity string `json:"identity,omitempty"`
	Name     string `json:"name,omitempty"`
	// Mode is VoiceAudio (the default) or VoiceText.
	Mode string `json:"mode,omitempty"`
}

// VoiceSession is a thread's LiveKit room and a token that lets the
// caller join it.
type VoiceSession struct {
	Thread string `json:"thread"`
	// URL is the LiveKit server to connect to, Room the thread's room.
	URL  string `json:"url"`
	Room string `json:"room"`
	// Token joins the room as Identity until Expires; it may publish only
	// a microphone and data.
	Identity string    `json:"identity"`
	Token    string    `json:"token"`
	Expires  time.Time `json:"expires"`
	Mode     string    `json:"mode"`
	// Agent says whether the voice agent was asked to join ("dispatched")
	// or is in the room already ("present").
	Agent string `json:"agent"`
	// Topic is the data topic the caller and the agent talk on.
	Topic string `json:"topic"`
}

// VoiceDispatch is what the API hands the voice agent (through LiveKit's
// agent dispatch) for a room: the thread, and a grant to run its turns.
type VoiceDispatch struct {
	Thread string `json:"thread"`
	Flow   string `json:"flow"`
	// Version is the version of its flow the thread ran as the session
	// opened (GET /v1/flows/{name}?version= reads it): its conversation
	// block, not the one of the version loaded now, says where a reply
	// goes.
	Version string `json:"version,omitempty"`
	Mode    string `json:"mode"`
	// Session is the voice session the grant belongs to.
	Session string `json:"session"`
	// Grant is a bearer token for this API that reaches this thread's
	// state and runs, its flow and the speech routes, nothing else, while
	// its session lives: until Expires, unless the agent renews it (POST
	// /v1/threads/{id}/voice/grant) every RenewSeconds.
	Grant        string    `json:"grant"`
	Expires      time.Time `json:"expires"`
	RenewSeconds int       `json:"renew_seconds"`
}

// VoiceGrant is a renewed grant's session: it lives until Expires (never
// past Deadline) unless renewed again within RenewSeconds.
type VoiceGrant struct {
	Session      string    `json:"session"`
	Expires      time.Time `json:"expires"`
	Deadline     time.Time `json:"deadline"`
	RenewSeconds int       `json:"renew_seconds"`
}

// SigningKey names the key voice agents' grants are signed with (its
// secret stays in the store).
type SigningKey struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
}

// Why a voice agent's grant is refused: the details of its 401 name one
// (details.reason). An agent whose session ended leaves quietly (it was
// replaced, or its room closed); otherwise it tells its caller why.
const (
	GrantInvalid = "invalid" // not a grant the server's current key signed, or past the server's cap
	GrantEnded   = "ended"   // its session ended (or was replaced)
	GrantExpired = "expired" // its session expired: its agent did not renew it
	GrantRevoked = "revoked" // the key that opened its session was revoked, or its thread deleted
)

// GrantRefusal is why err refuses a grant ("" when it does not).
func GrantRefusal(err error) string {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnauthorized {
		return ""
	}
	switch d := e.Details.(type) {
	case map[string]any:
		r, _ := d["reason"].(string)
		return r
	case map[string]string:
		return d["reason"]
	}
	return ""
}

// VoiceTopic is the data topic of a voice session's messages.
const VoiceTopic = "trellis.voice"
