// Package mapnode is the map node kind (dynamic fan-out): it runs a node
// once per item of a list, up to max_concurrency at once, and folds the
// items' writes through their fields' reducers in item order, whatever
// order they complete in.
//
//	review_sections:
//	  kind: map
//	  items: "state.sections"
//	  max_concurrency: 4
//	  node:                      # any kind; its expressions read item and index
//	    kind: llm
//	    prompt: resume_review/section
//	    vars: {section: item}
//	    writes: {section_reviews: output}   # section_reviews: append
//	  on_item_error: {set: {section_reviews: "{'section': item.title, 'score': 5.0}"}}
//	  writes: {failed_sections: "map(filter(results, !.ok), .index)"}
//
// Each item's run is a node of its own in the events (NODE[index]) with
// the nested node's retry, timeout and cache; a completed item's writes
// are kept as a pending write, so a step resumed after a crash runs only
// the unfinished items. An item that fails follows on_item_error: fail
// the node (the default: its on_error applies), skip the item, or write
// fallback values for it. Items that pause (they ask, or their child flow
// does) pause the node once every item has run or paused, with all their
// questions: the run resumed with some answers runs the node again, which
// finds the completed items done and runs only the paused ones.
package mapnode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/value"
)

// DefaultMaxConcurrency is how many items run at once when the node sets
// no max_concurrency.
const DefaultMaxConcurrency = 10

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "map",
	Summary: "Run a node (of any kind, a subflow too) once per item of a list, up to max_concurrency at once; the items' writes fold through their fields' reducers in item order.",
	Fields: []config.Field{
		config.Expression("items", "A list: an expression over state, input and config. The node runs once per item, reading item and index.").Require(),
		config.Ref("node", "The node run per item: a kind and its settings (retry, timeout and cache too), whose expressions also read item and index. Its writes fold through their fields' reducers in item order, so those fields need a reducer that takes several writes (append, union, merge, add, ...). An item that asks (an interrupt, or a subflow that asks) pauses the run with a question of its own, NODE[INDEX]; the map completes once every item has.", "node").Require(),
		config.Integer("max_concurrency", "How many items run at once (default 10).").Min(1),
		config.OneOf("on_item_error", "What an item that still fails after its retries does: fail this node (the default; its on_error then applies), skip the item, or write fallback values in its place.",
			config.Const("fail"), config.Const("skip"),
			config.Object("", "",
				config.Map("set", "Field to expression over item, index, error (the failure's message), state, input and config.", nil).NonEmpty(1).Require(),
			),
		),
		config.Map("writes", "Field to expression over results (one per item, in item order: {index, item, ok, error, update}), state, input and config, such as which items failed.",
			config.Elem(config.Expression("", ""))),
	},
	New: build,
}

type policy int

const (
	failNode policy = iota
	skipItem
	setValues
)

type node struct {
	items    *expression.Program
	nested   *kind.Nested
	max      int
	policy   policy
	fallback kind.Writes
	writes   kind.Writes
}

var _ kind.Composite = (*node)(nil)

var intShape = &schema.Shape{Types: []string{"integer"}}

// resultsShape is the shape of results: what each item's run came to.
var resultsShape = &schema.Shape{Types: []string{"array"}, Items: func() *schema.Shape {
	s := schema.Object(map[string]*schema.Shape{
		"index":  intShape,
		"item":   nil,
		"ok":     {Types: []string{"boolean"}},
		"error":  {Types: []string{"string", "null"}},
		"update": {Types: []string{"object"}},
	}, "index", "item", "ok", "error", "update")
	s.Closed = true
	return s
}()}

func build(b kind.Builder) kind.Node {
	s := b.Settings()
	n := &node{max: DefaultMaxConcurrency}
	ok := true
	var itemShape *schema.Shape
	if v := s.Value("items"); v.Exists() {
		if n.items = b.Expr(v, nil); n.items == nil {
			ok = false
		} else {
			sh := n.items.Shape()
			switch t := n.items.ResultType(); {
			case sh != nil && len(sh.Types) > 0 && !sh.Allows("array"):
				b.Report(diag.CodeMapNode, v.Pos(), v.Path(), "items must be a list, but this expression is %s", sh.Describe())
				ok = false
			case sh == nil && t != nil && t.Kind() != reflect.Slice && t.Kind() != reflect.Array && t.Kind() != reflect.Interface:
				b.Report(diag.CodeMapNode, v.Pos(), v.Path(), "items must be a list, but this expression yields %s", t)
				ok = false
			}
			if sh != nil {
				itemShape = sh.Items
			}
		}
	}
	vars := kind.Vars{"item": itemShape, "index": intShape}
	if n.nested = b.Nested(s.Value("node"), vars); n.nested == nil {
		ok = false
	}
	if m, has := s.Int("max_concurrency"); has {
		n.max = m
	}
	switch oe := s.Value("on_item_error"); {
	case oe.Text() == "skip":
		n.policy = skipItem
	case oe.IsMapping():
		n.policy = setValues
		fvars := kind.Vars{"item": itemShape, "index": intShape, "error": {Types: []string{"string"}}}
		var fok bool
		n.fallback, fok = kind.CompileEntries(b, s.Object("on_item_error").Entries("set"), "on_item_error.set", fvars)
		ok = ok && fok
	}
	writes, wok := kind.CompileWrites(b, "writes", kind.Vars{"results": resultsShape})
	n.writes = writes
	if !ok || !wok {
		return nil
	}
	return n
}

// result is one item's run.
type result struct {
	update kind.Update
	err    error
}

// Run implements kind.Node.
func (n *node) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	v, err := s.Eval(n.items)
	if err != nil {
		return nil, fmt.Errorf("items: %w", err)
	}
	var list []any
	switch x := v.(type) {
	case nil:
	case []any:
		list = x
	default:
		// a list of one type (split gives strings): its items as values
		if t := reflect.TypeOf(v); t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
			return nil, fmt.Errorf("items: %T is not a list", v)
		}
		norm, err := value.Normalize(v)
		if err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		list, _ = norm.([]any)
	}
	results := make([]result, len(list))
	sem := make(chan struct{}, n.max)
	var wg sync.WaitGroup
	// with the fail policy no item starts after one failed; those running
	// finish (their writes are kept), and the failure reported is the
	// first in item order, so it does not depend on timing
	var failed atomic.Bool
launch:
	for i, item := range list {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break launch
		}
		if failed.Load() {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			upd, err := s.RunNested(ctx, n.nested, strconv.Itoa(i), map[string]any{"item": item, "index": i})
			results[i] = result{update: upd, err: err}
			if _, paused := kind.PausedBy(err); err != nil && !paused && n.policy == failNode {
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if failed.Load() {
		for i, r := range results {
			if _, paused := kind.PausedBy(r.err); r.err != nil && !paused {
				return nil, fmt.Errorf("item %d of %d: %w", i, len(list), r.err)
			}
		}
	}
	// items that paused (they ask, or their child flow does) pause the
	// node: it runs again when the run is resumed, and finds the items
	// that completed done
	errs := make([]error, len(results))
	for i, r := range results {
		errs[i] = r.err
	}
	if p := kind.Pause(errs...); p != nil {
		return nil, p
	}
	upd := s.NewUpdate(len(list))
	var failedItems []string
	for i := range results {
		r := &results[i]
		if r.err == nil {
			upd = append(upd, r.update...)
			continue
		}
		failedItems = append(failedItems, strconv.Itoa(i))
		if n.policy != setValues {
			continue
		}
		fv := maps.Clone(s.Vars())
		fv["item"], fv["index"], fv["error"] = list[i], i, r.err.Error()
		fb, err := n.fallback.Eval(fv)
		if err != nil {
			return nil, fmt.Errorf("item %d: on_item_error: %w (after: %v)", i, err, r.err)
		}
		r.update = fb
		upd = append(upd, fb...)
	}
	if len(failedItems) > 0 {
		what := "skipped"
		if n.policy == setValues {
			what = "written with their fallback values"
		}
		s.Degrade(fmt.Sprintf("%d of %d items failed (%s), %s; the first: %v", len(failedItems), len(list),
			strings.Join(failedItems, ", "), what, firstFailure(results)))
	}
	if len(n.writes) > 0 {
		rs := make([]any, len(results))
		for i, r := range results {
			var msg any
			if r.err != nil {
				msg = r.err.Error()
			}
			u := r.update.Map()
			if u == nil {
				u = map[string]any{}
			}
			rs[i] = map[string]any{"index": i, "item": list[i], "ok": r.err == nil, "error": msg, "update": u}
		}
		wv := maps.Clone(s.Vars())
		wv["results"] = rs
		w, err := n.writes.Eval(wv)
		if err != nil {
			return nil, err
		}
		upd = append(upd, w...)
	}
	return upd, nil
}

func firstFailure(rs []result) error {
	for _, r := range rs {
		if r.err != nil {
			return r.err
		}
	}
	return errors.New("none")
}

// Parts implements kind.Composite.
func (n *node) Parts() kind.Parts {
	return kind.Parts{Each: n.items.Source(), Nested: n.nested, MaxConcurrency: n.max}
}
