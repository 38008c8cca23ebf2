// Package memory is the memory node kind: it gets, puts, deletes and
// searches documents that runs remember across threads, under a
// namespace built from state, and writes what it found to state.
//
//	recall:
//	  kind: memory
//	  action: search                                   # get, put, delete or search
//	  namespace: "['candidates', state.user_id]"       # a list of names; for search, a prefix
//	  query: state.topic                               # search: words every document found holds
//	  limit: 20
//	  schema: ../schemas/note.json                     # the documents' JSON Schema (optional)
//	  writes:
//	    notes: "map(output, .value)"
//
//	remember:
//	  kind: memory
//	  action: put
//	  namespace: "['candidates', state.user_id]"
//	  key: state.interview_id
//	  value: "{topic: state.topic, score: state.score}"
//	  ttl: 2160h                                       # forgotten after 90 days
//	  index: false                                     # never searched by its words
//	  schema: ../schemas/note.json
//
// A document found is {namespace, key, value, updated, expires} (times
// as RFC 3339 text, expires null when it never expires): get's output is
// one or null, search's a list (most relevant first with a query, most
// recently updated first without), put's the document written, delete's
// whether there was one. With a schema, a put's value is checked against
// it (statically as far as the expression's type is known, and before it
// is written), what get and search find is checked too, and writes that
// read output.value are typed by it.
//
// A put indexes the document's words for a search's query, unless it
// says index: false: the document is then found by get and by a search
// without a query (a namespace's listing), never by one with a query, and
// its put costs no update of the store's full-text index.
//
// The documents are the run's memory (kind.MemoryOf): its store's, on a
// server its tenant's, so another tenant never sees them. A search
// matches whole words of the documents' strings, in any case.
package memory

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "memory",
	Summary: "Get, put, delete or search documents remembered across threads (per tenant), under a namespace built from state; write what was found to state.",
	Fields: []config.Field{
		config.String("action", "What the node does: get a document, put one, delete one, or search a namespace and those under it.").
			OneOfValues("get", "put", "delete", "search").Require(),
		config.Expression("namespace", "The namespace: an expression over state and input giving a list of names, such as ['candidates', state.user_id]; a search looks under it as a prefix.").Require(),
		config.Expression("key", "get, put and delete: the document's key, an expression giving a string."),
		config.Expression("value", "put: the document, an expression giving any JSON value."),
		config.Any("schema", "The documents' JSON Schema, inline or a path relative to this file: a put's value is checked against it, what get and search find must match it, and writes reading output.value are typed by it.").
			AlsoTypes("object", "string"),
		config.Duration("ttl", "put: how long the document is kept (default: until it is replaced or deleted)."),
		config.Bool("index", "put: whether a search's query finds the document by its words (default true); false keeps it out of the full-text index, for documents only read by key or by listing their namespace, which then cost no index update."),
		config.Expression("query", "search: words every document found holds, in its strings (an expression giving a string; none or empty: every document, newest first)."),
		config.Integer("limit", "search: the most documents found (default 10).").Min(1).Max(1000),
		config.Map("writes", "Field to expression over output, state and input. output is, for get, the document found ({namespace, key, value, updated, expires}) or null; for search, a list of them; for put, the document written; for delete, whether there was one.",
			config.Elem(config.Expression("", ""))),
	},
	New: build,
}

type action string

const (
	get    action = "get"
	put    action = "put"
	del    action = "delete"
	search action = "search"
)

type node struct {
	action                       action
	namespace, key, value, query *expression.Program
	schema                       *schema.Validator // nil: any document
	opts                         kind.PutOptions
	limit                        int
	writes                       kind.Writes
}

var (
	stringShape = &schema.Shape{Types: []string{"string"}}
	namesShape  = &schema.Shape{Types: []string{"array"}, Items: stringShape}
)

// itemShape is the shape of a document found, its value of shape value
// (nil: unknown).
func itemShape(value *schema.Shape) *schema.Shape {
	return schema.Object(map[string]*schema.Shape{
		"namespace": namesShape,
		"key":       stringShape,
		"value":     value,
		"updated":   stringShape,
		"expires":   {Types: []string{"string", "null"}},
	}, "namespace", "key", "value", "updated", "expires")
}

func build(b kind.Builder) kind.Node {
	s := b.Settings()
	n := &node{action: action(s.Value("action").Text())}
	ok := true
	// only is a setting only some actions take
	only := func(setting string, actions ...action) {
		if s.Has(setting) && !contains(actions, n.action) {
			b.Errorf(s.Key(setting), "%s is a setting of %s, not of %s", setting, names(actions), n.action)
			ok = false
		}
	}
	needs := func(setting string, actions ...action) {
		if !s.Has(setting) && contains(actions, n.action) {
			b.Errorf(s.Key("action"), "a %s needs %s", n.action, setting)
			ok = false
		}
	}
	switch n.action {
	case get, put, del, search:
	default:
		return nil // the flow schema reports it
	}
	only("key", get, put, del)
	needs("key", get, put, del)
	only("value", put)
	needs("value", put)
	only("ttl", put)
	only("index", put)
	only("query", search)
	only("limit", search)
	only("schema", get, put, search)
	if !s.Has("writes") && (n.action == get || n.action == search) {
		b.Errorf(s.Key("action"), "a %s writes what it finds: give writes", n.action)
		ok = false
	}

	compile := func(setting, want string) *expression.Program {
		if !s.Has(setting) {
			return nil
		}
		p := b.Expr(s.Value(setting), nil)
		if p == nil {
			ok = false
		} else if got := typeOf(p); got != "" && got != want {
			b.Errorf(s.Value(setting), "%s gives %s, not %s", setting, article(got), article(want))
			ok = false
		}
		return p
	}
	n.namespace = compile("namespace", "list")
	n.key = compile("key", "string")
	n.query = compile("query", "string")
	if s.Has("value") {
		if n.value = b.Expr(s.Value("value"), nil); n.value == nil {
			ok = false
		}
	}
	var valueShape *schema.Shape
	if sv := s.Value("schema"); sv.Exists() {
		js, err := b.Schema(sv, "schema")
		switch {
		case err != nil && err.Unreadable:
			b.Errorf(sv, "cannot read the schema %q (a schema, or a path relative to this file)", sv.Text())
			ok = false
		case err != nil:
			b.Report(diag.CodeKindSetting, err.Pos, sv.Path(), "invalid schema: %s", err.Message)
			ok = false
		default:
			n.schema, valueShape = js.Validator, js.Validator.Shape
			if n.value != nil {
				b.Fits(n.value, valueShape, s.Value("value"), "the documents' schema")
			}
		}
	}
	n.opts.TTL, _ = s.Duration("ttl")
	if s.Has("ttl") && n.opts.TTL < time.Second {
		b.Errorf(s.Value("ttl"), "ttl: %v is under a second", n.opts.TTL)
		ok = false
	}
	if index, set := s.Bool("index"); set {
		n.opts.Unindexed = !index
	}
	n.limit, _ = s.Int("limit")

	var out *schema.Shape
	switch n.action {
	case get:
		out = itemShape(valueShape)
		out.Types = []string{"object", "null"}
	case put:
		out = itemShape(valueShape)
	case search:
		out = &schema.Shape{Types: []string{"array"}, Items: itemShape(valueShape)}
	case del:
		out = &schema.Shape{Types: []string{"boolean"}}
	}
	writes, wok := kind.CompileWrites(b, "writes", kind.Vars{"output": out})
	n.writes = writes
	if !ok || !wok || n.namespace == nil {
		return nil
	}
	return n
}

func contains(as []action, a action) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

func names(as []action) string {
	s := ""
	for i, a := range as {
		switch {
		case i == 0:
		case i == len(as)-1:
			s += " and "
		default:
			s += ", "
		}
		s += string(a)
	}
	return s
}

func article(t string) string {
	switch t {
	case "object", "array":
		return "an " + t
	case "list":
		return "a list"
	}
	return "a " + t
}

// typeOf names the type an expression's result is known to have ("":
// unknown or any).
func typeOf(p *expression.Program) string {
	t := p.ResultType()
	if t == nil {
		return ""
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "list"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Float64, reflect.Uint, reflect.Int32, reflect.Float32:
		return "number"
	}
	return ""
}

// PutsWithStep implements kind.PutsWithStep: a put only computes the
// document its step writes (kind.StepMemory), where the run's memory
// writes puts with their step.
func (n *node) PutsWithStep() bool { return n.action == put }

// Run implements kind.Node.
func (n *node) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	mem, ok := kind.MemoryOf(ctx)
	if !ok {
		return nil, kind.Permanent(kind.ErrNoMemory)
	}
	vars := s.Vars()
	ns, err := n.names(vars)
	if err != nil {
		return nil, err
	}
	var key string
	if n.key != nil {
		if key, err = evalString(n.key, vars, "key"); err != nil {
			return nil, err
		}
	}
	var output any
	switch n.action {
	case get:
		it, err := mem.Get(ctx, ns, key)
		if err != nil {
			return nil, err
		}
		if it != nil {
			if err := n.check(it); err != nil {
				return nil, err
			}
			output = document(it)
		}
	case put:
		v, err := n.value.Eval(vars)
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		if n.schema != nil {
			if err := n.schema.Validate(v); err != nil {
				return nil, kind.Permanent(fmt.Errorf("value does not match the documents' schema: %w", err))
			}
		}
		var it *kind.MemoryItem
		if sm, ok := mem.(kind.StepMemory); ok {
			// written with the node's step, atomic with its update
			it, err = sm.PutWithStep(ctx, s, ns, key, v, n.opts)
		} else {
			it, err = mem.Put(ctx, ns, key, v, n.opts)
		}
		if err != nil {
			return nil, err
		}
		output = document(it)
	case del:
		found, err := mem.Delete(ctx, ns, key)
		if err != nil {
			return nil, err
		}
		output = found
	case search:
		var query string
		if n.query != nil {
			if query, err = evalString(n.query, vars, "query"); err != nil {
				return nil, err
			}
		}
		items, err := mem.Search(ctx, ns, query, n.limit)
		if err != nil {
			return nil, err
		}
		found := make([]any, len(items))
		for i, it := range items {
			if err := n.check(it); err != nil {
				return nil, err
			}
			found[i] = document(it)
		}
		output = found
	}
	return n.WithOutput(s, output)
}

// WithOutput implements kind.Outputter: flow tests give a memory node's
// output (what it found) and its writes still apply.
func (n *node) WithOutput(s kind.State, output any) (kind.Update, error) {
	if len(n.writes) == 0 {
		return nil, nil
	}
	vars := maps.Clone(s.Vars())
	vars["output"] = output
	return n.writes.Eval(vars)
}

// names evaluates the namespace into its names.
func (n *node) names(vars map[string]any) ([]string, error) {
	v, err := n.namespace.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	var ns []string
	switch x := v.(type) {
	case []string:
		ns = x
	case []any:
		for i, e := range x {
			name, ok := e.(string)
			if !ok {
				return nil, kind.Permanent(fmt.Errorf("namespace: name %d is %s, not a string", i+1, describe(e)))
			}
			ns = append(ns, name)
		}
	default:
		return nil, kind.Permanent(fmt.Errorf("namespace: %s, not a list of names", describe(v)))
	}
	return ns, nil
}

func evalString(p *expression.Program, vars map[string]any, what string) (string, error) {
	v, err := p.Eval(vars)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	s, ok := v.(string)
	if !ok {
		return "", kind.Permanent(fmt.Errorf("%s: %s, not a string", what, describe(v)))
	}
	return s, nil
}

func describe(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%T %v", v, v)
}

// check checks a document found against the schema.
func (n *node) check(it *kind.MemoryItem) error {
	if n.schema == nil {
		return nil
	}
	if err := n.schema.Validate(it.Value); err != nil {
		return kind.Permanent(fmt.Errorf("the document %v %q does not match the documents' schema: %w", it.Namespace, it.Key, err))
	}
	return nil
}

// document is a document as expressions read it.
func document(it *kind.MemoryItem) map[string]any {
	ns := make([]any, len(it.Namespace))
	for i, name := range it.Namespace {
		ns[i] = name
	}
	var expires any
	if !it.Expires.IsZero() {
		expires = it.Expires.UTC().Format(time.RFC3339Nano)
	}
	return map[string]any{
		"namespace": ns,
		"key":       it.Key,
		"value":     it.Value,
		"updated":   it.Updated.UTC().Format(time.RFC3339Nano),
		"expires":   expires,
	}
}

var _ kind.Outputter = (*node)(nil)
