package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/value"
)

// Listing is a server's tools, as listed or pinned: what a flow is
// checked against and its model offered.
type Listing struct {
	// Server is the server's name and version, as it says.
	Server string        `json:"server,omitempty"`
	Tools  []*listedTool `json:"tools"`
}

// listedTool is one tool of a listing.
type listedTool struct {
	Name         string         `json:"name"`
	Description  string         `json:"description,omitempty"`
	InputSchema  map[string]any `json:"inputSchema"`
	OutputSchema map[string]any `json:"outputSchema,omitempty"`
}

// same reports whether two tools are the same to a flow, and if not how
// they differ.
func (a *listedTool) differs(b *listedTool) string {
	switch {
	case !reflect.DeepEqual(norm(a.InputSchema), norm(b.InputSchema)):
		return "its input schema changed"
	case !reflect.DeepEqual(norm(a.OutputSchema), norm(b.OutputSchema)):
		return "its output schema changed"
	case a.Description != b.Description:
		return "its description changed"
	}
	return ""
}

// norm is a schema as JSON decodes it, so that two spellings compare.
func norm(m map[string]any) any {
	if m == nil {
		return nil
	}
	v, _ := toJSON(m)
	return v
}

func toJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return value.Decode(b)
}

// diff says how a server's listing differs from the pinned one ("" when
// they agree).
func diff(pinned, live *Listing) string {
	var out []string
	for _, p := range pinned.Tools {
		i := slices.IndexFunc(live.Tools, func(t *listedTool) bool { return t.Name == p.Name })
		if i < 0 {
			out = append(out, "tool "+p.Name+" is gone")
			continue
		}
		if why := p.differs(live.Tools[i]); why != "" {
			out = append(out, "tool "+p.Name+": "+why)
		}
	}
	for _, t := range live.Tools {
		if !slices.ContainsFunc(pinned.Tools, func(p *listedTool) bool { return p.Name == t.Name }) {
			out = append(out, "tool "+t.Name+" is new")
		}
	}
	return strings.Join(out, "; ")
}

// listing gives the server's tools at load: the server's when it answers
// (and then the pinned copy, if any, must agree), else the pinned copy.
func (e *entry) listing(b kind.Builder, live bool, pinName string, named bool) (*Listing, bool) {
	block := b.Settings().Block()
	at := block
	if named {
		at = b.Settings().Value("pin")
	}
	pinned, pinPath, perr := readPin(b, pinName)
	var fetched *Listing
	var ferr error
	if live {
		fetched, ferr = e.fetch(block)
	}
	how := "`trellis mcp pin " + block.File().Path + "` writes it from the server"
	switch {
	case perr != nil && !os.IsNotExist(perr):
		b.Report(diag.CodeToolServer, at.Pos(), at.Path(), "the pinned copy of MCP server %s (%s) cannot be read: %v; %s", e.describe(), pinPath, perr, how)
		return nil, false
	case fetched != nil && pinned != nil:
		if d := diff(pinned, fetched); d != "" {
			b.Report(diag.CodeToolServer, at.Pos(), at.Path(), "MCP server %s lists other tools than its pinned copy %s: %s; once the flow suits them, %s", e.describe(), pinPath, d, how)
			return nil, false
		}
		return fetched, true
	case fetched != nil:
		return fetched, true
	case pinned != nil:
		return pinned, true
	}
	why := "it was not asked (offline)"
	if ferr != nil {
		why = ferr.Error()
	}
	b.Report(diag.CodeToolServer, at.Pos(), at.Path(), "the tools of MCP server %s are not known: the server does not answer (%s) and there is no pinned copy %s; %s", e.describe(), why, pinPath, how)
	return nil, false
}

// readPin reads a pinned copy, named relative to the flow.
func readPin(b kind.Builder, name string) (*Listing, string, error) {
	res, err := b.File(name)
	if err != nil {
		return nil, name, err
	}
	var l Listing
	dec := json.NewDecoder(bytes.NewReader(res.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, res.Path, fmt.Errorf("not a listing of tools: %v", err)
	}
	for i, t := range l.Tools {
		if t == nil || t.Name == "" || t.InputSchema == nil {
			return nil, res.Path, fmt.Errorf("tools[%d] has no name or no inputSchema", i)
		}
	}
	return &l, res.Path, nil
}

// listings keeps the listings fetched at load a short while: a flow loaded
// again and again (each edit in the studio) does not start its server each
// time.
var listings = struct {
	sync.Mutex
	m map[string]cachedListing
}{m: map[string]cachedListing{}}

type cachedListing struct {
	l   *Listing
	err error
	at  time.Time
}

const listingTTL = 10 * time.Second

// fetch lists the server's tools, rendering a url with the run
// configuration's defaults.
func (e *entry) fetch(block config.Value) (*Listing, error) {
	srv, err := e.server(configDefaults(block))
	if err != nil {
		return nil, err
	}
	listings.Lock()
	c, ok := listings.m[srv.key]
	listings.Unlock()
	if ok && time.Since(c.at) < listingTTL {
		return c.l, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.listTimeout)
	defer cancel()
	l, err := srv.list(ctx)
	listings.Lock()
	listings.m[srv.key] = cachedListing{l, err, time.Now()}
	listings.Unlock()
	return l, err
}

// Pin lists the tools of the MCP servers a flow file's tools block
// names, rendering urls with the run configuration's defaults, and writes
// each entry's pinned copy (its pin, or FLOW.ENTRY.mcp.json beside the
// flow). It returns the files written.
func Pin(ctx context.Context, flowPath string) ([]string, error) {
	src, err := os.ReadFile(flowPath)
	if err != nil {
		return nil, err
	}
	var dl diag.List
	doc := config.Parse(flowPath, src, &dl)
	if doc == nil {
		return nil, fmt.Errorf("%s: %v", flowPath, dl)
	}
	var written []string
	stem := strings.TrimSuffix(filepath.Base(flowPath), filepath.Ext(flowPath))
	for _, te := range doc.Root().Get("tools").Entries() {
		if te.Value.Get("kind").Text() != "mcp" {
			continue
		}
		e := &entry{name: te.Name, dir: filepath.Dir(flowPath)}
		for _, it := range te.Value.Get("command").Items() {
			e.command = append(e.command, it.Text())
		}
		if u := te.Value.Get("url"); u.Exists() {
			t, err := parseTemplate(te.Name+".url", u.Text())
			if err != nil {
				return written, fmt.Errorf("tools.%s.url: %w", te.Name, err)
			}
			e.url = t
			for _, h := range te.Value.Get("headers").Entries() {
				ht, err := parseTemplate(te.Name+".headers."+h.Name, h.Value.Text())
				if err != nil {
					return written, fmt.Errorf("tools.%s.headers.%s: %w", te.Name, h.Name, err)
				}
				e.headers = append(e.headers, header{h.Name, ht})
			}
		}
		srv, err := e.server(configDefaults(te.Value))
		if err != nil {
			return written, fmt.Errorf("tools.%s: %w", te.Name, err)
		}
		l, err := srv.list(ctx)
		if err != nil {
			return written, fmt.Errorf("tools.%s: %w", te.Name, err)
		}
		name := te.Value.Get("pin").Text()
		if name == "" {
			name = stem + "." + te.Name + ".mcp.json"
		}
		p := filepath.Join(filepath.Dir(flowPath), name)
		b, err := json.MarshalIndent(l, "", "  ")
		if err != nil {
			return written, err
		}
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}
