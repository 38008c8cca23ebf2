package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/tmpl"
)

// server is a server as a run reaches it: its command, or its URL and
// headers as rendered; key names it among the process's sessions.
type server struct {
	e       *entry
	key     string
	url     string
	headers map[string]string
}

// server renders how to reach the entry's server with cfg.
func (e *entry) server(cfg map[string]any) (*server, error) {
	s := &server{e: e}
	if e.url != nil {
		u, err := render(e.url, cfg)
		if err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		if u = strings.TrimSpace(u); u == "" || u == "<no value>" {
			return nil, errors.New("the url renders empty: give the run configuration its value")
		}
		s.url = u
		s.headers = map[string]string{}
		for _, h := range e.headers {
			v, err := render(h.t, cfg)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", h.name, err)
			}
			if strings.ContainsAny(v, "\r\n") {
				return nil, fmt.Errorf("header %s: the value holds a line break", h.name)
			}
			s.headers[h.name] = v
		}
	}
	b, _ := json.Marshal([]any{e.command, e.dir, s.url, s.headers})
	s.key = string(b)
	return s, nil
}

// sessions are the process's open sessions, one per server, closed when
// idle a while (or by CloseSessions).
var sessions = struct {
	sync.Mutex
	m     map[string]*session
	timer *time.Timer
}{m: map[string]*session{}}

const idleAfter = 2 * time.Minute

type session struct {
	mu   sync.Mutex // held while connecting
	cs   *mcp.ClientSession
	tail *tailBuffer // the server's stderr (stdio)
	// checked are the tools found unchanged since the flow was loaded
	checked map[*entry]bool
	used    time.Time
}

// CloseSessions closes every session to an MCP server this process holds
// (their servers started over stdio end).
func CloseSessions() {
	sessions.Lock()
	m := sessions.m
	sessions.m = map[string]*session{}
	if sessions.timer != nil {
		sessions.timer.Stop()
		sessions.timer = nil
	}
	sessions.Unlock()
	for _, s := range m {
		s.close()
	}
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs != nil {
		_ = s.cs.Close()
		s.cs = nil
	}
}

// reap closes the sessions idle longer than idleAfter.
func reap() {
	sessions.Lock()
	var idle []*session
	for k, s := range sessions.m {
		if time.Since(s.used) > idleAfter {
			idle = append(idle, s)
			delete(sessions.m, k)
		}
	}
	if len(sessions.m) > 0 {
		sessions.timer = time.AfterFunc(idleAfter, reap)
	} else {
		sessions.timer = nil
	}
	sessions.Unlock()
	for _, s := range idle {
		s.close()
	}
}

// open returns the process's session to the server, connecting it first.
func (srv *server) open(ctx context.Context) (*session, error) {
	sessions.Lock()
	s := sessions.m[srv.key]
	if s == nil {
		s = &session{checked: map[*entry]bool{}}
		sessions.m[srv.key] = s
	}
	s.used = time.Now()
	if sessions.timer == nil {
		sessions.timer = time.AfterFunc(idleAfter, reap)
	}
	sessions.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs != nil {
		return s, nil
	}
	cs, tail, err := srv.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to MCP server %s: %w", srv.e.describe(), err)
	}
	s.cs, s.tail = cs, tail
	return s, nil
}

// drop forgets a session that failed, so the next call connects anew.
func (srv *server) drop(s *session) {
	sessions.Lock()
	if sessions.m[srv.key] == s {
		delete(sessions.m, srv.key)
	}
	sessions.Unlock()
	s.close()
}

// connect starts or reaches the server and opens a session.
func (srv *server) connect(ctx context.Context) (*mcp.ClientSession, *tailBuffer, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "trellis", Version: "1"}, nil)
	var t mcp.Transport
	var tail *tailBuffer
	if srv.e.command != nil {
		cmd := exec.Command(srv.e.command[0], srv.e.command[1:]...)
		cmd.Dir = srv.e.dir
		tail = &tailBuffer{}
		cmd.Stderr = tail
		dieWithParent(cmd)
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	} else {
		t = &mcp.StreamableClientTransport{Endpoint: srv.url, HTTPClient: &http.Client{Transport: headers{srv.headers, http.DefaultTransport}},
			DisableStandaloneSSE: true, MaxRetries: -1}
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		if tail != nil && tail.String() != "" {
			err = fmt.Errorf("%w (it said: %s)", err, tail.String())
		}
		return nil, nil, err
	}
	return cs, tail, nil
}

// headers adds a server's headers to each request.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.h) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.h {
			r.Header.Set(k, v)
		}
	}
	return h.next.RoundTrip(r)
}

// list lists the server's tools on a session of its own.
func (srv *server) list(ctx context.Context) (*Listing, error) {
	cs, _, err := srv.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	return listTools(ctx, cs)
}

func listTools(ctx context.Context, cs *mcp.ClientSession) (*Listing, error) {
	l := &Listing{}
	if r := cs.InitializeResult(); r != nil && r.ServerInfo != nil {
		l.Server = strings.TrimSpace(r.ServerInfo.Name + " " + r.ServerInfo.Version)
	}
	cursor := ""
	for page := 0; page < 100; page++ {
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		for _, t := range res.Tools {
			lt := &listedTool{Name: t.Name, Description: t.Description}
			if err := remarshal(t.InputSchema, &lt.InputSchema); err != nil {
				return nil, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
			}
			if t.OutputSchema != nil {
				if err := remarshal(t.OutputSchema, &lt.OutputSchema); err != nil {
					return nil, fmt.Errorf("tool %s: output schema: %w", t.Name, err)
				}
			}
			l.Tools = append(l.Tools, lt)
		}
		if cursor = res.NextCursor; cursor == "" {
			return l, nil
		}
	}
	return nil, errors.New("list tools: more than 100 pages")
}

func remarshal(from, to any) error {
	b, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, to)
}

// call makes one call of t on the server's session: the session first
// checks that the server still has the tools the flow was loaded with.
func (srv *server) call(ctx context.Context, t *tool, args map[string]any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, srv.e.timeout)
	defer cancel()
	timedOut := func(err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("MCP server %s did not answer within %s: %w", srv.e.describe(), srv.e.timeout, context.DeadlineExceeded)
		}
		return err
	}
	s, err := srv.open(ctx)
	if err != nil {
		return nil, timedOut(err)
	}
	s.mu.Lock()
	cs, checked := s.cs, s.checked[srv.e]
	s.mu.Unlock()
	if cs == nil {
		return nil, fmt.Errorf("MCP server %s: the session closed", srv.e.describe())
	}
	if !checked {
		l, err := listTools(ctx, cs)
		if err != nil {
			srv.drop(s)
			return nil, timedOut(err)
		}
		for name, want := range srv.e.listed {
			if d := diff(&Listing{Tools: []*listedTool{want}}, &Listing{Tools: pick(l, name)}); d != "" {
				return nil, fmt.Errorf("MCP server %s changed since the flow was loaded: %s", srv.e.describe(), d)
			}
		}
		s.mu.Lock()
		s.checked[srv.e] = true
		s.mu.Unlock()
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.name, Arguments: args})
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) {
			// the session may be stuck or gone: the next call starts anew
			srv.drop(s)
		}
		if s.tail != nil && s.tail.String() != "" {
			err = fmt.Errorf("%w (the server said: %s)", err, s.tail.String())
		}
		return nil, timedOut(err)
	}
	out, err := t.result(res)
	if err == nil {
		if b, _ := json.Marshal(out); len(b) > srv.e.maxBytes {
			return nil, fmt.Errorf("the result is larger than the tool's cap of %d bytes (max_bytes)", srv.e.maxBytes)
		}
	}
	return out, err
}

// pick is the tool named name of a listing, as a list of one (or none).
func pick(l *Listing, name string) []*listedTool {
	for _, t := range l.Tools {
		if t.Name == name {
			return []*listedTool{t}
		}
	}
	return nil
}

// result reads a call's result: a tool error is told to the model; else
// the structured content, checked against the output schema, or the text.
func (t *tool) result(res *mcp.CallToolResult) (any, error) {
	var texts []string
	for _, c := range res.Content {
		switch x := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, x.Text)
		case *mcp.ImageContent:
			texts = append(texts, fmt.Sprintf("[an image, %s, %d bytes]", x.MIMEType, len(x.Data)))
		case *mcp.AudioContent:
			texts = append(texts, fmt.Sprintf("[audio, %s, %d bytes]", x.MIMEType, len(x.Data)))
		case *mcp.ResourceLink:
			texts = append(texts, fmt.Sprintf("[a resource: %s %s]", x.Name, x.URI))
		case *mcp.EmbeddedResource:
			if x.Resource != nil {
				texts = append(texts, x.Resource.Text)
			}
		}
	}
	text := strings.Join(texts, "\n")
	if res.IsError {
		if text == "" {
			text = "the tool failed"
		}
		return nil, kind.ToolFailed(errors.New(text))
	}
	if res.StructuredContent != nil {
		v, err := toJSON(res.StructuredContent)
		if err != nil {
			return nil, err
		}
		if t.output != nil {
			if err := t.output.Validate(v); err != nil {
				return nil, fmt.Errorf("the result does not match the tool's output schema: %w", err)
			}
		}
		return v, nil
	}
	if t.output != nil {
		return nil, errors.New("the tool declares an output schema but gave no structured content")
	}
	return text, nil
}

// tailBuffer keeps the last bytes a server wrote on its stderr.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const tailSize = 2048

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if n := t.buf.Len(); n > 2*tailSize {
		b := append([]byte(nil), t.buf.Bytes()[n-tailSize:]...)
		t.buf.Reset()
		t.buf.Write(b)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf.Bytes()
	if len(b) > tailSize {
		b = b[len(b)-tailSize:]
	}
	return strings.TrimSpace(string(b))
}

func parseTemplate(name, text string) (*template.Template, error) { return tmpl.Parse(name, text) }
