package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/engine"
)

// Client calls a Trellis server. Its methods return *Error for every
// answer the server gives as an error.
type Client struct {
	// BaseURL is the server's root, such as http://127.0.0.1:8080.
	BaseURL string
	// Key is the API key sent as a bearer token.
	Key string
	// HTTP is the client to use (nil: http.DefaultClient).
	HTTP *http.Client
}

// NewClient returns a client of the server at baseURL with key.
func NewClient(baseURL, key string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Key: key}
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	if k := IdempotencyKey(ctx); k != "" && method != http.MethodGet {
		req.Header.Set(IdempotencyKeyHeader, k)
	}
	return req, nil
}

// do sends a request and decodes a JSON answer into out (nil: none).
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return decodeError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return decode(resp.Body, out)
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb ErrorBody
	if err := decodeBytes(b, &eb); err != nil || eb.Error == nil {
		return &Error{Code: CodeInternal, Status: resp.StatusCode, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))}
	}
	eb.Error.Status = resp.StatusCode
	return eb.Error
}

// IsCode reports whether err is an API error with code.
func IsCode(err error, code Code) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// WaitAgain reports whether err is a server's answer to a client waiting
// on a run (RunWait, Join) that it stopped before the run ended
// (run_requeued, or unavailable naming the run), and which run to wait
// for again: on another server, or on this one once it restarts.
func WaitAgain(err error) (run string, ok bool) {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeRunRequeued && e.Code != CodeUnavailable {
		return "", false
	}
	switch d := e.Details.(type) {
	case map[string]any:
		run, _ = d["run"].(string)
	case map[string]string:
		run = d["run"]
	}
	return run, run != ""
}

// Flows lists the loaded flows.
func (c *Client) Flows(ctx context.Context) ([]Flow, error) {
	var out FlowList
	err := c.do(ctx, http.MethodGet, "/v1/flows", nil, &out)
	return out.Flows, err
}

// Flow returns a flow with its schemas and source.
func (c *Client) Flow(ctx context.Context, name string) (*Flow, error) {
	var out Flow
	err := c.do(ctx, http.MethodGet, "/v1/flows/"+url.PathEscape(name), nil, &out)
	return &out, err
}

// FlowAt returns a version of a flow the server keeps (the one a thread
// is pinned to, say), as Flow does the version loaded now.
func (c *Client) FlowAt(ctx context.Context, name, version string) (*Flow, error) {
	var out Flow
	err := c.do(ctx, http.MethodGet, "/v1/flows/"+url.PathEscape(name)+"?version="+url.QueryEscape(version), nil, &out)
	return &out, err
}

// Validate checks a flow file's text (name locates the files it names on
// the server) and returns its diagnostics; an invalid flow is an *Error
// with code invalid_flow whose Details hold them.
func (c *Client) Validate(ctx context.Context, name string, src []byte) (*Validation, error) {
	req, err := c.request(ctx, http.MethodPost, "/v1/flows/validate?name="+url.QueryEscape(name), nil)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(src))
	req.ContentLength = int64(len(src))
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return nil, decodeError(resp)
	}
	var out Validation
	return &out, decode(resp.Body, &out)
}

// ReloadFlows reloads the server's flow directory (an admin key).
func (c *Client) ReloadFlows(ctx context.Context) (*Reload, error) {
	var out Reload
	err := c.do(ctx, http.MethodPost, "/v1/flows/reload", nil, &out)
	return &out, err
}

// ReloadAndPromote reloads the flow directory and promotes the versions
// it loads: new threads of every flow start on them, on every server
// sharing the store.
func (c *Client) ReloadAndPromote(ctx context.Context) (*Reload, error) {
	var out Reload
	err := c.do(ctx, http.MethodPost, "/v1/flows/reload?promote=true", nil, &out)
	return &out, err
}

// CreateThread starts a thread.
func (c *Client) CreateThread(ctx context.Context, t CreateThread) (*Thread, error) {
	var out Thread
	err := c.do(ctx, http.MethodPost, "/v1/threads", t, &out)
	return &out, err
}

// Thread returns a thread.
func (c *Client) Thread(ctx context.Context, id string) (*Thread, error) {
	var out Thread
	err := c.do(ctx, http.MethodGet, "/v1/threads/"+url.PathEscape(id), nil, &out)
	return &out, err
}

// ThreadQuery filters and pages Threads.
type ThreadQuery struct {
	Flow     string
	Metadata map[string]string
	After    string
	Limit    int
}

// Threads lists threads, newest first.
func (c *Client) Threads(ctx context.Context, q ThreadQuery) (*ThreadList, error) {
	v := url.Values{}
	if q.Flow != "" {
		v.Set("flow", q.Flow)
	}
	for k, x := range q.Metadata {
		v.Set("metadata["+k+"]", x)
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out ThreadList
	err := c.do(ctx, http.MethodGet, "/v1/threads?"+v.Encode(), nil, &out)
	return &out, err
}

// State returns a thread's newest state, or (at > 0) its state at a
// checkpoint.
func (c *Client) State(ctx context.Context, id string, at uint64) (*State, error) {
	path := "/v1/threads/" + url.PathEscape(id) + "/state"
	if at > 0 {
		path += "?at=" + strconv.FormatUint(at, 10)
	}
	var out State
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return &out, err
}

// ChildState is the state of the child flow (a subflow) thread id ran
// under namespace ns (NODE:SEQ, as its events name it). History reads
// the child's checkpoints with ns in its query.
func (c *Client) ChildState(ctx context.Context, id, ns string) (*State, error) {
	var out State
	err := c.do(ctx, http.MethodGet, "/v1/threads/"+url.PathEscape(id)+"/state?ns="+url.QueryEscape(ns), nil, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Voice opens (or rejoins) a thread's voice session: its LiveKit room, a
// token to join it, and the voice agent asked to join.
func (c *Client) Voice(ctx context.Context, id string, r VoiceRequest) (*VoiceSession, error) {
	var out VoiceSession
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(id)+"/voice", r, &out)
	return &out, err
}

// EndVoice ends a thread's voice session: its agent's grant stops
// working and its room closes, with whoever is in it.
func (c *Client) EndVoice(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/threads/"+url.PathEscape(id)+"/voice", nil, nil)
}

// RenewVoiceGrant renews the voice session of the grant the client holds
// (as its Key): the voice agent's heartbeat.
func (c *Client) RenewVoiceGrant(ctx context.Context, thread string) (*VoiceGrant, error) {
	var out VoiceGrant
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(thread)+"/voice/grant", nil, &out)
	return &out, err
}

// EndVoiceGrant gives up the grant the client holds: its session ends.
func (c *Client) EndVoiceGrant(ctx context.Context, thread string) error {
	return c.do(ctx, http.MethodDelete, "/v1/threads/"+url.PathEscape(thread)+"/voice/grant", nil, nil)
}

// RotateVoiceSigningKey replaces the key voice agents' grants are signed
// with (an admin key): every grant signed before stops working.
func (c *Client) RotateVoiceSigningKey(ctx context.Context) (*SigningKey, error) {
	var out SigningKey
	err := c.do(ctx, http.MethodPost, "/v1/voice/signing-key", nil, &out)
	return &out, err
}

// History lists a thread's checkpoints, newest first; query takes
// before, limit, source, run and node.
func (c *Client) History(ctx context.Context, id string, query url.Values) ([]Checkpoint, error) {
	var out History
	err := c.do(ctx, http.MethodGet, "/v1/threads/"+url.PathEscape(id)+"/history?"+query.Encode(), nil, &out)
	return out.Checkpoints, err
}

// Fork starts a thread from a checkpoint of thread id.
func (c *Client) Fork(ctx context.Context, id string, f Fork) (*Thread, error) {
	var out Thread
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(id)+"/fork", f, &out)
	return &out, err
}

// Update writes values to a thread as if a node had written them.
func (c *Client) Update(ctx context.Context, id string, u Update) (*State, error) {
	var out State
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(id)+"/update", u, &out)
	return &out, err
}

// Replay re-runs thread id from a checkpoint on a new thread.
func (c *Client) Replay(ctx context.Context, id string, rp Replay) (*Replayed, error) {
	var out Replayed
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(id)+"/replay", rp, &out)
	return &out, err
}

// FlowTest makes a flow test of thread id (and saves it, if asked).
func (c *Client) FlowTest(ctx context.Context, id string, m MakeFlowTest) (*FlowTest, error) {
	var out FlowTest
	err := c.do(ctx, http.MethodPost, "/v1/threads/"+url.PathEscape(id)+"/flow-test", m, &out)
	return &out, err
}

// DeleteThread deletes a thread with its checkpoints and runs.
func (c *Client) DeleteThread(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/threads/"+url.PathEscape(id), nil, nil)
}

func runsPath(thread string) string { return "/v1/threads/" + url.PathEscape(thread) + "/runs" }

// StartRun starts a run in the background and returns it queued or
// running.
func (c *Client) StartRun(ctx context.Context, thread string, r StartRun) (*Run, error) {
	var out Run
	err := c.do(ctx, http.MethodPost, runsPath(thread), r, &out)
	return &out, err
}

// RunWait starts a run and waits for it to end; the returned run holds
// the final state. A run that fails is returned with status failed, not
// as an error. When the server stops before the run ends, WaitAgain tells
// which run to wait for again (Join).
func (c *Client) RunWait(ctx context.Context, thread string, r StartRun) (*Run, error) {
	var out Run
	err := c.do(ctx, http.MethodPost, runsPath(thread)+"/wait", r, &out)
	return &out, err
}

// Run returns a run.
func (c *Client) Run(ctx context.Context, thread, run string) (*Run, error) {
	var out Run
	err := c.do(ctx, http.MethodGet, runsPath(thread)+"/"+url.PathEscape(run), nil, &out)
	return &out, err
}

// Runs lists a thread's runs, newest first.
func (c *Client) Runs(ctx context.Context, thread string) ([]Run, error) {
	out, err := c.RunPage(ctx, thread, RunQuery{})
	return out.Runs, err
}

// RunPage returns a page of a thread's runs, newest first; its Next,
// given as q.Before, reads the page after it.
func (c *Client) RunPage(ctx context.Context, thread string, q RunQuery) (*RunList, error) {
	v := url.Values{}
	if q.Before != "" {
		v.Set("before", q.Before)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := runsPath(thread)
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out RunList
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return &out, err
}

// Join waits for a run to end and returns it with the final state.
func (c *Client) Join(ctx context.Context, thread, run string) (*Run, error) {
	var out Run
	err := c.do(ctx, http.MethodGet, runsPath(thread)+"/"+url.PathEscape(run)+"/wait", nil, &out)
	return &out, err
}

// Cancel cancels a queued or running run.
func (c *Client) Cancel(ctx context.Context, thread, run string) (*Run, error) {
	var out Run
	err := c.do(ctx, http.MethodPost, runsPath(thread)+"/"+url.PathEscape(run)+"/cancel", nil, &out)
	return &out, err
}

// StreamEvent is one Server-Sent Event of a run: its id (give it back as
// lastEventID to continue after it) and the run's event.
type StreamEvent struct {
	ID    string
	Run   string
	Event engine.Event
}

// StreamRun starts a run and yields its events as they happen. A run that
// fails ends with a run_error event, not an error; an error is the
// connection's (or the run could not start). A stream whose server stopped
// before the run ended ends with a RunRequeued event: the run resumes
// elsewhere, and JoinStream continues after the event's ID.
func (c *Client) StreamRun(ctx context.Context, thread string, r StartRun) iter.Seq2[StreamEvent, error] {
	return c.stream(ctx, http.MethodPost, runsPath(thread)+"/stream", r, "")
}

// JoinStream yields a run's events from the one after lastEventID (""
// for all): a client whose connection dropped continues where it was.
func (c *Client) JoinStream(ctx context.Context, thread, run, lastEventID string) iter.Seq2[StreamEvent, error] {
	return c.stream(ctx, http.MethodGet, runsPath(thread)+"/"+url.PathEscape(run)+"/stream", nil, lastEventID)
}

func (c *Client) stream(ctx context.Context, method, path string, body any, lastEventID string) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		req, err := c.request(ctx, method, path, body)
		if err != nil {
			yield(StreamEvent{}, err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		if lastEventID != "" {
			req.Header.Set("Last-Event-ID", lastEventID)
		}
		resp, err := c.http().Do(req)
		if err != nil {
			yield(StreamEvent{}, err)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 400 {
			yield(StreamEvent{}, decodeError(resp))
			return
		}
		run := resp.Header.Get("Trellis-Run")
		for msg, err := range ReadEvents(resp.Body) {
			if err != nil {
				yield(StreamEvent{}, err)
				return
			}
			se := StreamEvent{ID: msg.ID, Run: run}
			if err := decodeBytes(msg.Data, &se.Event); err != nil {
				yield(StreamEvent{}, fmt.Errorf("event %s: %w", msg.ID, err))
				return
			}
			if !yield(se, nil) {
				return
			}
		}
	}
}

// Message is one Server-Sent Events message.
type Message struct {
	ID, Event string
	Data      []byte
}

// ReadEvents parses a Server-Sent Events stream (comments and retry
// fields are skipped).
func ReadEvents(r io.Reader) iter.Seq2[Message, error] {
	return func(yield func(Message, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 16<<20)
		var m Message
		var data [][]byte
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 {
				if data != nil {
					m.Data = bytes.Join(data, []byte("\n"))
					if !yield(m, nil) {
						return
					}
				}
				m, data = Message{}, nil
				continue
			}
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) {
			case "id":
				m.ID = string(value)
			case "event":
				m.Event = string(value)
			case "data":
				data = append(data, bytes.Clone(value))
			}
		}
		if err := sc.Err(); err != nil {
			yield(Message{}, err)
		}
	}
}

// CreateKey creates an API key (an admin key); the returned key's Secret
// is the key, shown only now.
func (c *Client) CreateKey(ctx context.Context, k CreateKey) (*Key, error) {
	var out Key
	err := c.do(ctx, http.MethodPost, "/v1/keys", k, &out)
	return &out, err
}

// Keys lists the keys (an admin key).
func (c *Client) Keys(ctx context.Context) ([]Key, error) {
	var out KeyList
	err := c.do(ctx, http.MethodGet, "/v1/keys", nil, &out)
	return out.Keys, err
}

// RevokeKey revokes a key (an admin key).
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil)
}

// Ready reports whether the server is ready (its store answers).
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil)
}
