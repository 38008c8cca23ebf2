// Package mcptool is the mcp tool kind: the tools of a Model Context
// Protocol server, through the official Go SDK, over stdio (a command this
// process starts) or streamable HTTP (a URL).
//
//	tools:
//	  notes:
//	    kind: mcp
//	    url: "{{.config.notes_url}}"       # or command: [notes-server, --stdio]
//	    headers: {Authorization: "Bearer {{.config.notes_token}}"}
//	    tools: [search, delete_note]       # which of the server's tools (default: all)
//	    approve: {when: "tool == 'delete_note'"}
//
// The server's tools, with their schemas, are known at load: listed from
// the server when it answers (with the run configuration's defaults), and
// otherwise read from a pinned copy beside the flow, FLOW.ENTRY.mcp.json
// (`trellis mcp pin FLOW` writes it from the server). A server that
// answers with tools other than the pinned ones is a load error: the flow
// was checked against what its model will be offered, and a server that
// changed since is caught before a run. At run time each server (by its
// command, or its URL and headers as the run renders them) has one
// session per process, which first checks that the server still lists
// the tools the flow was loaded with.
//
// A call's result is the tool's structured content (checked against its
// output schema when it declares one), else its text. A tool error
// (isError) is told to the model; a server that does not answer within
// the entry's timeout, or a result against its schema, fails the node.
package mcptool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/tmpl"
)

// Defaults.
const (
	DefaultTimeout  = 60 * time.Second
	DefaultMaxBytes = 1 << 20
	// DefaultListTimeout bounds listing a server's tools at load.
	DefaultListTimeout = 10 * time.Second
)

// NewSpec returns the tool kind; with live set, a flow's load lists each
// server's tools from the server when it answers (offline: only from the
// pinned copy).
func NewSpec(live bool) kind.ToolSpec {
	return kind.ToolSpec{
		Name:    "mcp",
		Summary: "The tools of an MCP server, over stdio (command) or streamable HTTP (url): known at load from the server, or from a pinned copy beside the flow when it does not answer; each call goes to the server.",
		Fields: []config.Field{
			config.List("command", "Start this command and speak MCP over its standard input and output (in the flow's directory).",
				config.Elem(config.String("", "").NonEmpty(1))).NonEmpty(1),
			config.Template("url", "The server's streamable HTTP endpoint: a template over config ({{.config.notes_url}})."),
			config.Map("headers", "Header to template over config, sent to a url server (a credential: {{.config.token}}, with secret: true).",
				config.Elem(config.Template("", ""))),
			config.List("tools", "The server's tools the model may call (default: all of them).",
				config.Elem(config.String("", "").NonEmpty(1))).NonEmpty(1).Distinct(),
			config.String("prefix", "Put before each tool's name as the model sees it (notes_search), to keep apart the tools of two servers.").Match(`^[A-Za-z0-9_-]*$`),
			config.String("pin", "The pinned copy of the server's tools, relative to the flow (default FLOW.ENTRY.mcp.json beside it).").NonEmpty(1),
			config.Duration("timeout", "How long a call may wait for the server (default 60s)."),
			config.Duration("list_timeout", "How long loading the flow waits for the server to list its tools (a command to start, a url to answer) before it reads the pinned copy instead (default 10s)."),
			config.Integer("max_bytes", "The largest result taken, as JSON (default 1 MiB); a larger one fails the call.").Min(1),
		}, New: func(b kind.Builder) []*kind.Tool { return build(b, live) },
	}
}

// entry is a tools entry of this kind: how to reach its server, and the
// server's tools as the flow was loaded with them.
type entry struct {
	name    string
	command []string
	dir     string
	url     *template.Template
	headers []header
	timeout time.Duration
	// listTimeout bounds listing the server's tools at load
	listTimeout time.Duration
	// maxBytes caps a result
	maxBytes int
	// listed are the server's tools the flow uses, by their own names
	listed map[string]*listedTool
}

type header struct {
	name string
	t    *template.Template
}

// tool is one tool of the server, as the model calls it.
type tool struct {
	e      *entry
	name   string // the server's name for it
	output *schema.Validator
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9_-]`)

func build(b kind.Builder, live bool) []*kind.Tool {
	s := b.Settings()
	block := s.Block()
	e := &entry{name: b.Node(), timeout: DefaultTimeout, listTimeout: DefaultListTimeout, maxBytes: DefaultMaxBytes, dir: path.Dir(block.File().Path)}
	if d, ok := s.Duration("timeout"); ok {
		e.timeout = d
	}
	if d, ok := s.Duration("list_timeout"); ok {
		e.listTimeout = d
	}
	if n, ok := s.Int("max_bytes"); ok {
		e.maxBytes = n
	}
	cv, uv := s.Value("command"), s.Value("url")
	switch {
	case cv.Exists() && uv.Exists():
		b.Report(diag.CodeToolSetting, uv.Pos(), uv.Path(), "an MCP server is reached by command or by url, not both")
		return nil
	case cv.Exists():
		for _, it := range cv.Items() {
			e.command = append(e.command, it.Text())
		}
		if s.Has("headers") {
			b.Report(diag.CodeToolSetting, s.Value("headers").Pos(), s.Value("headers").Path(), "headers go to a url server, not to a command")
			return nil
		}
	case uv.Exists():
		configOnly := kind.Vars{}
		if e.url = b.Template(uv, b.Node()+".url", configOnly); e.url == nil {
			return nil
		}
		for _, h := range s.Entries("headers") {
			t := b.Template(h.Value, b.Node()+".headers."+h.Name, configOnly)
			if t == nil {
				return nil
			}
			e.headers = append(e.headers, header{h.Name, t})
		}
	default:
		b.Report(diag.CodeToolSetting, block.Pos(), "tools."+b.Node(), "tool %q reaches its MCP server by command (stdio) or url (streamable HTTP): give one", b.Node())
		return nil
	}
	pinName, hasPin := s.String("pin")
	if !hasPin {
		stem := strings.TrimSuffix(path.Base(block.File().Path), path.Ext(block.File().Path))
		pinName = stem + "." + b.Node() + ".mcp.json"
	}
	listing, ok := e.listing(b, live, pinName, hasPin)
	if !ok {
		return nil
	}
	// the tools the entry takes, in the server's order
	wanted := listing.Tools
	if tv := s.Value("tools"); tv.Exists() {
		var names []string
		for _, t := range listing.Tools {
			names = append(names, t.Name)
		}
		wanted = nil
		for _, it := range tv.Items() {
			i := slices.IndexFunc(listing.Tools, func(t *listedTool) bool { return t.Name == it.Text() })
			if i < 0 {
				b.Report(diag.CodeToolName, it.Pos(), it.Path(), "MCP server %s has no tool %q (it has %s)", e.describe(), it.Text(), strings.Join(names, ", ")).
					Suggestion = diag.Suggest(it.Text(), names)
				ok = false
				continue
			}
			wanted = append(wanted, listing.Tools[i])
		}
	}
	prefix, _ := s.String("prefix")
	e.listed = map[string]*listedTool{}
	var out []*kind.Tool
	for _, lt := range wanted {
		params, err := compileSchema(e.name, lt.Name, "input", lt.InputSchema)
		if err == nil && !params.Shape.Is("object") {
			err = errors.New("it is not an object schema")
		}
		if err != nil {
			b.Report(diag.CodeToolSetting, block.Pos(), "tools."+b.Node(), "tool %s of MCP server %s: its input schema cannot be used: %v", lt.Name, e.describe(), err)
			ok = false
			continue
		}
		t := &tool{e: e, name: lt.Name}
		var result *schema.Shape
		if lt.OutputSchema != nil {
			if t.output, err = compileSchema(e.name, lt.Name, "output", lt.OutputSchema); err != nil {
				b.Report(diag.CodeToolSetting, block.Pos(), "tools."+b.Node(), "tool %s of MCP server %s: its output schema cannot be used: %v", lt.Name, e.describe(), err)
				ok = false
				continue
			}
			result = t.output.Shape
		}
		e.listed[lt.Name] = lt
		out = append(out, &kind.Tool{Name: prefix + unsafe.ReplaceAllString(lt.Name, "_"), Description: lt.Description,
			Parameters: maps.Clone(lt.InputSchema), Params: params, Result: result, Impl: t})
	}
	if !ok {
		return nil
	}
	return out
}

// describe names the server in messages.
func (e *entry) describe() string {
	if e.command != nil {
		return fmt.Sprintf("%q (command %s)", e.name, strings.Join(e.command, " "))
	}
	return fmt.Sprintf("%q", e.name)
}

// compileSchema compiles a schema a server gave.
func compileSchema(entry, tool, which string, raw map[string]any) (*schema.Validator, error) {
	doc, err := toJSON(raw)
	if err != nil {
		return nil, err
	}
	// a server's schema stands alone: it refers to no file of this machine
	noFiles := func(p string) ([]byte, error) { return nil, fmt.Errorf("%s: a server's schema refers to no file", p) }
	c, err := schema.NewCompiler(noFiles).Compile("trellis:mcp/"+entry+"/"+tool+"."+which+".json", doc)
	if err != nil {
		return nil, err
	}
	return schema.NewValidator(c, schema.ShapeOf(doc, nil)), nil
}

// render renders a template over the run's configuration.
func render(t *template.Template, cfg map[string]any) (string, error) {
	return tmpl.Execute(t, map[string]any{"config": cfg})
}

// configDefaults are the defaults of the flow's run configuration, which
// a url is rendered with at load.
func configDefaults(block config.Value) map[string]any {
	out := map[string]any{}
	for _, e := range block.File().Root().Get("config").Entries() {
		if d := e.Value.Get("default"); d.Exists() {
			if v, err := d.JSON(); err == nil {
				out[e.Name] = v
			}
		}
	}
	return out
}

// Call implements kind.Caller.
func (t *tool) Call(ctx context.Context, s kind.State, c *kind.Call) (any, error) {
	cfg, _ := s.Vars()["config"].(map[string]any)
	srv, err := t.e.server(cfg)
	if err != nil {
		return nil, err
	}
	return srv.call(ctx, t, c.Args)
}

var _ kind.Caller = (*tool)(nil)
