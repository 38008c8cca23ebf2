package flow

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

const (
	startName = "START"
	endName   = "END"
)

// Load reads, validates and compiles the flow file at path on the disk.
// It returns the graph when there are no errors, and every diagnostic
// found in any case.
func Load(path string, reg kind.Registry) (*Graph, diag.List) {
	g, dl, _ := Compile(nil, path, nil, reg)
	return g, dl
}

// LoadSource is Load for a flow already in memory; path locates the files
// it names (relative schema and prompt files) and names it in
// diagnostics.
func LoadSource(path string, src []byte, reg kind.Registry) (*Graph, diag.List) {
	g, dl, _ := Compile(nil, path, src, reg)
	return g, dl
}

// LoadFS is Load for a flow inside a file system, such as an embed.FS:
// path and every file it names are read from fsys.
func LoadFS(fsys fs.FS, path string, reg kind.Registry) (*Graph, diag.List) {
	g, dl, _ := Compile(config.FS(fsys), path, nil, reg)
	return g, dl
}

// Compile reads, validates and compiles the flow at path from files (the
// disk when nil); src, when not nil, is the flow file's content. It
// returns the graph (nil when there are errors), every diagnostic sorted,
// and the text of every file it read, for printing diagnostics with their
// source lines.
func Compile(files *config.Files, path string, src []byte, reg kind.Registry) (*Graph, diag.List, diag.Sources) {
	g, dl, sources, _ := compileIn(nil, 0, files, path, src, reg)
	return g, dl, sources
}

// compileIn is Compile within a batch (nil: none) as its load seq, which
// also returns what it compiled (nil when the file cannot be read, or
// with no batch).
func compileIn(b *Batch, seq int, files *config.Files, path string, src []byte, reg kind.Registry) (*Graph, diag.List, diag.Sources, *compiled) {
	if files == nil {
		files = config.Disk()
	}
	c := &compiler{reg: reg, files: files, dir: files.Dir(path), sources: diag.Sources{}, shared: map[string]any{}, children: map[string]*kind.Subflow{},
		batch: b, seq: seq, included: map[string]bool{files.URL(path): true}}
	if src == nil {
		var err error
		if src, err = files.ReadFile(path); err != nil {
			c.dl.Errorf(diag.CodeYAML, diag.Pos{File: path}, "", "cannot read flow: %v", err)
			return nil, c.dl, c.sources, nil
		}
	}
	c.sources[path] = src
	g := c.compile(path, src)
	var res *compiled
	if b != nil {
		res = c.result(g) // (a flow loaded itself may be run by another)
	}
	dl := slices.Clone(c.dl).Sort()
	if dl.HasErrors() {
		return nil, dl, c.sources, res
	}
	return g, dl, c.sources, res
}

// compiler holds one load's work: the graph being built and everything the
// phases pass on to each other.
type compiler struct {
	reg     kind.Registry
	files   *config.Files
	dir     string
	dl      diag.List
	sources diag.Sources
	doc     *config.File
	root    config.Value
	g       *Graph
	// kindKeys are the top-level keys the registry's kinds declare.
	kindKeys []config.Field

	stateShape *schema.Shape
	inShape    *schema.Shape
	env        *expression.Env
	// shared holds what kinds build once per load (Builder.Shared).
	shared map[string]any
	// chain holds the files (as URLs) whose subflows are being compiled,
	// outermost first, and chainNames their names; children the
	// subflows compiled in this load, by URL (nil: it has errors).
	chain, chainNames []string
	children          map[string]*kind.Subflow
	// badNodes have format errors in their block; their kind is not built.
	// badTools are the same for tools entries, and toolEntries the
	// entries compiled, by name.
	badNodes    map[string]bool
	badTools    map[string]bool
	toolEntries map[string]*ToolEntry
	toolMisses  int
	// writes records where each node declares a write: node -> field -> pos;
	// definite the fields each node writes whenever it succeeds, and
	// errorWrites those its on_error.set writes when it fails.
	writes                map[string]map[string]diag.Pos
	definite, errorWrites map[string]map[string]bool
	pendingRoutes         []pendingRoute
	// Nodes named by edges that did not compile: the graph checks assume
	// the best of them (reached, reaching END) rather than cascade.
	assumeReached, assumeEnds map[*Node]bool
	// reader is the node whose settings or outgoing edge are being
	// compiled (readerRan: an edge, read after its node ran); nullReads
	// are the reads through possibly-null values found meanwhile, judged
	// once the graph is known.
	reader    *Node
	readerRan bool
	nullReads []nullRead
	// fieldReads are the unguarded reads of state fields, for
	// unsetWarnings
	fieldReads []fieldRead
	// abs is the abstract execution, once the graph is analysed.
	abs *abstractRun
	// batch, when set, shares compilations between loads (see Batch), seq
	// is this load's in it; included are the flow files this compilation
	// compiled.
	batch    *Batch
	seq      int
	included map[string]bool
	// refs holds what each node's settings read ("state.x", "input.x",
	// "config.x", or a whole "state"), keys what a cached node's key
	// reads and where it is; inKey is set while a key is compiled.
	refs  map[*Node]map[string]bool
	keys  map[*Node]cacheKey
	inKey bool
}

// cacheKey is a cached node's key: what it reads, and where it is.
type cacheKey struct {
	refs map[string]bool
	at   config.Value
}

// fieldRead is an unguarded read of a state field by a node's settings
// (or, ran, by its outgoing edge).
type fieldRead struct {
	node  *Node
	ran   bool
	field string
	// at holds the read: an expression (at line, col to end), or a
	// template (at byte offset off, end runes long); its position is
	// worked out only for a read reported
	at             config.Value
	line, col, end int
	off            int
	path           string
	template       bool
}

// pos is where the read is.
func (r fieldRead) pos() diag.Pos {
	if r.template {
		return r.at.Span(r.off, r.end)
	}
	return r.at.PosIn(r.line, r.col, r.end)
}

// text is the expression, or the template's line, the read is in.
func (r fieldRead) text() string {
	if r.template {
		return lineAt(r.at.Text(), r.off)
	}
	return r.at.Text()
}

// compile runs the phases in order: the file and its format, the state,
// the conversation block, the nodes (each kind builds its own), the edges,
// then the graph-wide analyses and the output (which reads the graph). Each phase reports what it finds and
// builds what it can, so that one load reports every problem.
func (c *compiler) compile(path string, src []byte) *Graph {
	d := config.Parse(path, src, &c.dl, config.ParseOptions{Duplicate: func(ptr string) (diag.Code, string) {
		if ptr == "/nodes" {
			return diag.CodeDuplicateNode, "node"
		}
		return diag.CodeDuplicate, "key"
	}})
	if d == nil {
		return nil
	}
	c.doc, c.root = d, d.Root()
	if !c.root.IsMapping() {
		c.dl.Errorf(diag.CodeType, c.root.Pos(), "", "a flow must be a mapping with version, name, state, nodes and edges")
		return nil
	}
	fv, err := formatFor(c.reg)
	if err != nil {
		c.dl.Errorf(diag.CodeConstraint, c.root.Pos(), "", "flow format: %v", err)
		return nil
	}
	c.kindKeys = fv.top
	before := len(c.dl)
	fv.check(d, &c.dl)
	c.badNodes, c.badTools = map[string]bool{}, map[string]bool{}
	for _, x := range c.dl[before:] {
		if rest, ok := strings.CutPrefix(x.Path, "nodes."); ok {
			c.badNodes[strings.SplitN(rest, ".", 2)[0]] = true
		}
		if rest, ok := strings.CutPrefix(x.Path, "tools."); ok {
			c.badTools[strings.SplitN(rest, ".", 2)[0]] = true
		}
	}
	top := config.NewSettings(c.root, flowFields(c.kindKeys))
	if v, _ := top.Value("version").JSON(); v != Version {
		// the format check reported it; nothing below can be trusted
		return nil
	}
	c.g = &Graph{Path: path, fields: map[string]*Field{}, nodes: map[string]*Node{}, MaxSteps: DefaultMaxSteps}
	c.g.Name, _ = top.String("name")
	c.g.Description, _ = top.String("description")
	c.writes = map[string]map[string]diag.Pos{}
	c.definite, c.errorWrites = map[string]map[string]bool{}, map[string]map[string]bool{}
	if n, ok := top.Object("limits").Int("max_steps"); ok {
		c.g.MaxSteps = n
	}
	c.state(top.Object("state"))
	c.configBlock(top.Value("config"))
	// an expression over config (without a config block, the format
	// check reported the string)
	if v := top.Object("limits").Value("max_steps"); v.IsString() && c.g.ConfigShape != nil {
		env := expression.NewEnv().With("config", c.g.ConfigShape)
		if p := c.compileExpr(v, env, false); p != nil {
			if t := jsonType(p.ResultType()); t != "" && t != "integer" {
				c.dl.Errorf(diag.CodeType, v.Pos(), "limits.max_steps", "max_steps must be an integer, but this expression yields %s", article(t))
			} else {
				c.g.MaxStepsExpr = p
			}
		}
	}
	c.conversation(top.Object("conversation"))
	c.toolsBlock(top.Value("tools"))
	c.nodes(top.Value("nodes"))
	c.unusedTools()
	for _, n := range c.g.Nodes {
		_, asks := n.Impl.(kind.Asker)
		c.g.Asks = c.g.Asks || asks
		c.g.Pauses = c.g.Pauses || n.InterruptBefore || n.InterruptAfter
		n.WriteMask = make([]bool, len(c.g.Fields))
		for i, f := range c.g.Fields {
			n.WriteMask[i] = n.Writes[f.Name]
		}
		n.WriteFields = make([]*Field, len(n.WriteList))
		for i, name := range n.WriteList {
			n.WriteFields[i], _ = c.g.Field(name)
		}
	}
	c.edges(top.Value("edges"))
	c.analyse()
	c.nullWarnings()
	c.unsetWarnings()
	c.cacheWarnings()
	c.output(top.Value("output"))
	c.lint(top.Object("lint"))
	c.g.env = c.env
	return c.g
}

// nullRead is a read through a value that may be null (path, such as
// state.x), by a node or, with no node, by the flow itself.
type nullRead struct {
	node *Node
	ran  bool
	path string
	d    diag.Diagnostic
}

// noteNullRead keeps a possibly-null read for nullWarnings.
func (c *compiler) noteNullRead(path string, d diag.Diagnostic) {
	c.nullReads = append(c.nullReads, nullRead{node: c.reader, ran: c.readerRan, path: path, d: d})
}

// nullWarnings reports the possibly-null reads of state fields that some
// way from START reaches without a step that writes the field: a read
// after the field's writer on every way is taken to see it set.
func (c *compiler) nullWarnings() {
	seen := map[string]bool{}
	for _, r := range c.nullReads {
		field, ok := strings.CutPrefix(r.path, "state.")
		if ok && !strings.Contains(field, ".") && r.node != nil && c.writtenBefore(field, r.node, r.ran) {
			continue
		}
		key := r.d.Pos.String() + r.d.Summary
		if !seen[key] {
			seen[key] = true
			c.dl.Add(r.d)
		}
	}
}

// unsetWarnings reports the reads of fields that have no default, are not
// inputs and may not be null, where some way from START reaches the reader
// with nothing written to the field: the read sees nothing. The way is
// named, step by step. Only ways the flow can take count: a join waits for
// all its sources, exclusive branches are apart, a loop's first round is
// one, a map's items may be none, on_error writes only on failure.
func (c *compiler) unsetWarnings() {
	seen := map[string]bool{}
	for _, r := range c.fieldReads {
		f, ok := c.g.fields[r.field]
		if !ok || f.HasDefault || f.Shape.Nullable() || r.node == nil || slices.Contains(c.stateShape.Required, f.Name) {
			// a required field is in every valid state: it is given when
			// the thread is created
			continue
		}
		way, why, unset := c.unsetWay(f, r.node, r.ran)
		if !unset {
			continue
		}
		// a template in a file of its own (a prompt) may be read by
		// several nodes: each is judged, and named
		pos := r.pos()
		shared := pos.File != c.doc.Path
		key := pos.String() + r.field
		if shared {
			key += "|" + r.node.Name
		}
		if seen[key] {
			continue
		}
		if f.Input {
			why += "; it is an input, which a run may leave out"
		}
		seen[key] = true
		where := "this node"
		switch {
		case r.ran:
			where = "this edge"
		case shared:
			where = fmt.Sprintf("node %q", r.node.Name)
		}
		what := "expression"
		if r.template {
			what = "template"
		}
		read := "it as state." + r.field + " ?? a value"
		if r.template {
			read = "it inside {{with .state." + r.field + "}} or {{if .state." + r.field + "}}"
		}
		c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeExprUnset, Pos: pos, Path: r.path,
			Summary: fmt.Sprintf("state.%s may be unset here: it has no default, and %s reaches %s with nothing written to it (%s); give it a default, or read %s",
				r.field, way, where, why, read),
			Detail: "in " + what + ": " + strings.TrimSpace(r.text())})
	}
}

// unsetWay says whether some way from START reaches n (ran: n's edge)
// with nothing written to field f, and then names the way and why its
// writers did not write it.
func (c *compiler) unsetWay(f *Field, n *Node, ran bool) (way, why string, unset bool) {
	if c.abs == nil || c.abs.overflow {
		path := c.unwrittenPath(f.Name, n, ran)
		if path == nil {
			return "", "", false
		}
		var writers []string
		for _, m := range c.g.Nodes {
			if m.Writes[f.Name] {
				writers = append(writers, m.Name)
			}
		}
		why = "no node writes it"
		if len(writers) > 0 {
			why = "it is written by " + strings.Join(writers, ", ") + ", which this path does not pass"
		}
		return strings.Join(path, " → "), why, true
	}
	si, found := c.abs.unsetAt(f.Index, n, ran)
	if !found {
		return "", "", false
	}
	steps := c.abs.witness(f.Index, si)
	if steps == nil {
		return "", "", false
	}
	return c.showSteps(steps), c.whyUnset(f.Name, n, steps), true
}

// unwrittenPath is a path from START to n on which no node writes field
// before n reads it (with ran, n's own write counts), or nil when every
// path passes a writer. It stands for the abstract execution on a flow
// too large to explore.
func (c *compiler) unwrittenPath(field string, n *Node, ran bool) []string {
	if ran && n.Writes[field] {
		return nil
	}
	parent := map[*Node]*Node{}
	seen := map[*Node]bool{}
	var queue []*Node
	for _, m := range entryTargets(c.g) {
		if !seen[m] {
			seen[m] = true
			queue = append(queue, m)
		}
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		if m == n {
			path := []string{n.Name}
			for p := parent[n]; p != nil; p = parent[p] {
				path = append([]string{p.Name}, path...)
			}
			return append([]string{"START"}, path...)
		}
		if m.Writes[field] {
			continue
		}
		for _, s := range successors(m) {
			if !seen[s] {
				seen[s] = true
				parent[s] = m
				queue = append(queue, s)
			}
		}
	}
	return nil
}

// writtenBefore reports whether every way from START to n writes field
// before n reads it (or, when ran, before n's edge does).
func (c *compiler) writtenBefore(field string, n *Node, ran bool) bool {
	f, ok := c.g.fields[field]
	if !ok {
		return false
	}
	if c.abs != nil && !c.abs.overflow {
		_, unset := c.abs.unsetAt(f.Index, n, ran)
		return !unset
	}
	if ran && n.Writes[field] {
		return true
	}
	unguarded := false
	walkFrom(entryTargets(c.g), func(m *Node) bool {
		unguarded = unguarded || m == n // reached with nothing writing the field on the way
		return !unguarded && !m.Writes[field]
	})
	return !unguarded
}

// refRoots are the values whose reads a cache key must cover.
var refRoots = []string{"state", "input", "config"}

// noteRefs records what node n's settings read (see compiler.refs); a
// template's "" (its whole data) reads every root.
func (c *compiler) noteRefs(n *Node, refs []string) {
	if c.refs == nil {
		c.refs, c.keys = map[*Node]map[string]bool{}, map[*Node]cacheKey{}
	}
	into := c.refs[n]
	if c.inKey {
		into = c.keys[n].refs
	}
	if into == nil {
		into = map[string]bool{}
		if c.inKey {
			c.keys[n] = cacheKey{refs: into}
		} else {
			c.refs[n] = into
		}
	}
	for _, r := range refs {
		root, _, _ := strings.Cut(r, ".")
		switch {
		case r == "":
			for _, root := range refRoots {
				into[root] = true
			}
		case slices.Contains(refRoots, root):
			into[r] = true
		}
	}
}

// cacheWarnings reports the cached nodes whose key leaves out something
// the node reads: a later run with the same key replays writes made for
// another value of it (a counter the node advances from its own value
// stops advancing).
func (c *compiler) cacheWarnings() {
	for _, n := range c.g.Nodes {
		key, ok := c.keys[n]
		if n.Cache == nil || !ok {
			continue
		}
		covered := func(r string) bool {
			root, _, _ := strings.Cut(r, ".")
			return key.refs[r] || key.refs[root]
		}
		var missing, self []string
		for _, r := range slices.Sorted(maps.Keys(c.refs[n])) {
			if covered(r) {
				continue
			}
			missing = append(missing, r)
			if f, ok := strings.CutPrefix(r, "state."); ok && n.Writes[f] {
				self = append(self, r)
			}
		}
		if len(missing) == 0 {
			continue
		}
		keyRefs := slices.Sorted(maps.Keys(key.refs))
		fix := append(slices.Clone(keyRefs), missing...)
		d := diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeCacheKey, Pos: key.at.Pos(), Path: n.Path + ".cache.key",
			Summary: fmt.Sprintf("the cache key of %q leaves out %s, which the node reads: a later run with the same key replays the writes made for another value of it; add it to the key, such as key: %q",
				n.Name, strings.Join(missing, ", "), "["+strings.Join(fix, ", ")+"]")}
		if len(self) > 0 {
			d.Detail = fmt.Sprintf("the node writes %s from its own value: once the key repeats, the old value is replayed and it stops changing", strings.Join(self, ", "))
		}
		c.dl.Add(d)
	}
}

// readFile reads a file the flow names, keeping its text for printing
// diagnostics.
func (c *compiler) readFile(name string) ([]byte, error) {
	b, err := c.files.ReadFile(name)
	if err == nil {
		c.sources[name] = b
	}
	return b, err
}

// readURL reads a file a JSON Schema refers to ($ref) by the path of its
// URL, keeping its text with the flow's other files: a flow's files are
// every file it was compiled from, so that its version changes with
// them and can be compiled from them alone.
func (c *compiler) readURL(p string) ([]byte, error) {
	b, err := c.files.ReadURLPath(p)
	if err == nil {
		c.sources[c.files.URLName(p)] = b
	}
	return b, err
}

// nodeNames lists the node names, for suggestions.
func (c *compiler) nodeNames() []string {
	names := make([]string, len(c.g.Nodes))
	for i, n := range c.g.Nodes {
		names[i] = n.Name
	}
	return names
}

// lint drops the warnings whose codes the flow's lint.ignore lists. A
// listed code that is not one, or that names only errors, or that this
// flow does not raise, is reported: a stale or mistaken entry would hide
// what it was meant to.
func (c *compiler) lint(s config.Settings) {
	v := s.Value("ignore")
	if !v.Exists() {
		return
	}
	ignore := map[diag.Code]config.Value{}
	var known []string
	for _, d := range diag.Codes {
		known = append(known, string(d.Code))
	}
	for _, it := range v.Items() {
		code := diag.Code(it.Text())
		if code.Doc() == "" {
			c.dl.Errorf(diag.CodeConstraint, it.Pos(), "lint.ignore", "%q is not a diagnostic code", it.Text()).Suggestion = diag.Suggest(it.Text(), known)
			continue
		}
		ignore[code] = it
	}
	used := map[diag.Code]bool{}
	kept := c.dl[:0]
	for _, d := range c.dl {
		if _, ok := ignore[d.Code]; ok && d.Severity == diag.Warning {
			used[d.Code] = true
			continue
		}
		kept = append(kept, d)
	}
	c.dl = kept
	for code, it := range ignore {
		if !used[code] {
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeConstraint, Pos: it.Pos(), Path: "lint.ignore",
				Summary: fmt.Sprintf("lint.ignore lists %s, but this flow raises no %s warning: remove it, or it will hide one you did not mean to accept", code, code)})
		}
	}
}
