package expression_test

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// typesEnv is a state of nullable fields of every kind.
func typesEnv() *expression.Env {
	obj := &schema.Shape{Types: []string{"object", "null"}, Closed: true, Required: []string{"n", "tags"},
		Props: map[string]*schema.Shape{"n": {Types: []string{"integer"}}, "tags": {Types: []string{"array"}, Items: &schema.Shape{Types: []string{"string"}}}},
		Order: []string{"n", "tags"}}
	item := &schema.Shape{Types: []string{"object"}, Closed: true, Required: []string{"id"},
		Props: map[string]*schema.Shape{"id": {Types: []string{"string"}}, "score": {Types: []string{"number"}}}, Order: []string{"id", "score"}}
	props := map[string]*schema.Shape{
		"n":     {Types: []string{"integer", "null"}},
		"s":     {Types: []string{"string", "null"}},
		"b":     {Types: []string{"boolean", "null"}},
		"o":     obj,
		"w":     {Types: []string{"integer"}},
		"items": {Types: []string{"array"}, Items: item},
		"maybe": {Types: []string{"array"}, Items: obj},
	}
	state := schema.Object(props)
	return expression.NewEnv().WithFields("state", state)
}

// An operation that fails on null, over a value that may be null, is
// E004 at the value's name; a test, ??, ?. or a let that narrows the
// value makes it safe.
func TestNullThroughOperations(t *testing.T) {
	env := typesEnv()
	for src, want := range map[string]string{
		"state.n + 1":                                        "state.n",
		"len(state.s)":                                       "state.s",
		"state.o?.n + 1":                                     "state.o?.n",
		"upper(state.s)":                                     "state.s",
		"state.n > 2":                                        "state.n",
		"!state.b":                                           "state.b",
		"state.b ? 1 : 2":                                    "state.b",
		"map(state.maybe, .n)":                               "#",
		"let q = state.o; q.n":                               "q",
		"state.n != nil && state.n + 1 > 2":                  "",
		"state.n == nil ? 0 : state.n + 1":                   "",
		"(state.n ?? 0) + 1":                                 "",
		"state.o?.n ?? 0":                                    "",
		"let q = state.o; q != nil ? q.n : 0":                "",
		"state.o != nil && len(state.o.tags) > 0":            "",
		"if state.s != nil { len(state.s) } else { 0 }":      "",
		"state.n == nil || state.n > 2":                      "",
		"map(filter(state.maybe, # != nil), .n)":             "",
		"len(state.items) > 0 ? last(state.items).id : ''":   "",
		"len(state.items) == 0 ? '' : first(state.items).id": "",
		"last(state.items).id":                               "last(state.items)",
		"let ok = state.s != nil; ok ? len(state.s) : 0":     "",
		"state.s in ['a', 'b'] ? len(state.s) : 0":           "",
		"state.s == 'a' ? len(state.s) : 0":                  "",
		"state.items[0].score + 1":                           "state.items[0].score",
		"(state.items[0].score ?? 0) + 1":                    "",
	} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Errorf("%s: %+v", src, probs)
			continue
		}
		if want == "" {
			if len(probs) > 0 {
				t.Errorf("%s: %+v, want none", src, probs)
			}
			continue
		}
		if len(probs) == 0 || probs[0].Code != diag.CodeExprMayBeNil || !probs[0].Warning || !strings.HasPrefix(probs[0].Message, want+" may be null here") {
			t.Errorf("%s: %+v, want E004 on %s", src, probs, want)
		}
	}
}

// A condition takes a boolean, or null as false; a value of another type
// is E002, said in words.
func TestConditionTypes(t *testing.T) {
	env := typesEnv()
	for src, want := range map[string]string{
		"state.b":                "",
		"state.b && state.w > 1": "",
		"state.o":                "condition is not boolean: it yields an object or null",
		"state.n":                "condition is not boolean: it yields an integer or null",
		"state.items":            "condition is not boolean: it yields an array",
	} {
		p, probs := expression.Compile(src, env, true)
		switch {
		case want == "" && p == nil:
			t.Errorf("%s: %+v", src, probs)
		case want != "" && (p != nil || len(probs) != 1 || probs[0].Code != diag.CodeExprNotBool || probs[0].Message != want):
			t.Errorf("%s: %+v, want %q", src, probs, want)
		}
	}
}

// A name bound by let keeps the shape of what it was bound to: a member
// a closed object does not declare is E003 with a suggestion, one an
// open object does not declare a warning.
func TestLetKeepsShapes(t *testing.T) {
	open := &schema.Shape{Types: []string{"object"}, Props: map[string]*schema.Shape{"headline": {Types: []string{"string"}}}, Order: []string{"headline"}}
	closed := *open
	closed.Closed = true
	env := expression.NewEnv().WithFields("state", schema.Object(map[string]*schema.Shape{"open": open, "closed": &closed}))
	p, probs := expression.Compile("let p = state.closed; p.headlin", env, false)
	if p != nil || len(probs) != 1 || probs[0].Code != diag.CodeExprUnknown || probs[0].Suggestion != "headline" || probs[0].Warning {
		t.Errorf("closed: %+v", probs)
	}
	p, probs = expression.Compile("let p = state.open; p.headlin", env, false)
	if p == nil || len(probs) != 1 || probs[0].Code != diag.CodeExprUnknown || !probs[0].Warning {
		t.Errorf("open: %+v", probs)
	}
	p, probs = expression.Compile("map([state.closed], .headlin)", env, false)
	if p != nil || len(probs) != 1 || probs[0].Code != diag.CodeExprUnknown || probs[0].Suggestion != "headline" {
		t.Errorf("in a predicate: %+v", probs)
	}
}

// Literals, and lists and maps of them, have their value known; a map
// literal is a closed object that has its keys.
func TestKnownValues(t *testing.T) {
	env := typesEnv()
	p, _ := expression.Compile("[{'id': 'x', 'n': -2}, {'id': 'y', 'n': 3.5}]", env, false)
	v, ok := p.Value()
	if !ok || len(v.([]any)) != 2 || v.([]any)[0].(map[string]any)["n"] != -2 {
		t.Fatalf("%#v %v", v, ok)
	}
	items := p.Type().Items
	if !items.Is("object") || !items.Closed || len(items.Required) != 2 || !items.Props["n"].Is("number") {
		t.Errorf("items %+v", items)
	}
	p, _ = expression.Compile("state.w > 1 ? 'a' : nil", env, false)
	if _, ok := p.Value(); ok || !p.Type().MayBeNull() || !p.Type().Allows("string") {
		t.Errorf("choice: %+v", p.Type())
	}
	p, _ = expression.Compile("max(state.w, 2.5)", env, false)
	if !p.Type().Is("number") {
		t.Errorf("max: %+v", p.Type())
	}
}

// The items filter keeps (and the one find finds) are narrowed by what
// its predicate proves of them where it holds (# not null, a member not
// null, at any depth), so
// a list filtered to items with a value sums without a warning; a
// predicate that proves nothing of the member read keeps the warning,
// and the list filtered from is not narrowed.
func TestFilterNarrowsItems(t *testing.T) {
	meta := &schema.Shape{Types: []string{"object", "null"}, Closed: true,
		Props: map[string]*schema.Shape{"score": {Types: []string{"number", "null"}}}, Order: []string{"score"}}
	sub := &schema.Shape{Types: []string{"object"}, Closed: true, Required: []string{"executed", "quality"},
		Props: map[string]*schema.Shape{"executed": {Types: []string{"boolean"}}, "quality": {Types: []string{"number", "null"}},
			"amount": {Types: []string{"number"}}, "note": {Types: []string{"string", "null"}}, "meta": meta},
		Order: []string{"executed", "quality", "amount", "note", "meta"}}
	env := expression.NewEnv().WithFields("state", schema.Object(map[string]*schema.Shape{
		"subs": {Types: []string{"array"}, Items: sub},
		"qs":   {Types: []string{"array"}, Items: &schema.Shape{Types: []string{"number", "null"}}},
	}))
	for src, warns := range map[string]bool{
		"let ran = filter(state.subs, .executed && .quality != nil); sum(map(ran, .quality)) / float(len(ran))": false,
		"sum(map(filter(state.subs, .quality != nil), .quality))":                                               false,
		"sum(map(filter(state.subs, nil != .quality), .quality))":                                               false,
		"sum(map(filter(state.subs, #.quality != nil), .quality))":                                              false,
		"sum(map(filter(state.subs, .quality != nil && .executed), .quality))":                                  false,
		"sum(map(filter(state.subs, !(.quality == nil)), .quality))":                                            false,
		"sum(map(filter(state.subs, .quality != nil && .quality > 0.5), .quality))":                             false,
		"sum(map(filter(state.subs, .amount != nil), .amount))":                                                 false,
		"sum(map(filter(state.subs, .meta != nil && .meta.score != nil), .meta.score))":                         false,
		"sum(map(filter(state.subs, .meta?.score != nil), .meta.score))":                                        false,
		"sum(filter(map(state.subs, .quality), # != nil))":                                                      false,
		"sum(filter(state.qs, nil != #))":                                                                       false,
		"let ran = filter(state.subs, .executed && .quality != nil); mean(map(ran, .quality))":                  false,
		"let s = find(state.subs, .quality != nil); s == nil ? 0.0 : s.quality + 1":                             false,
		"let s = findLast(state.subs, .meta?.score != nil); s == nil ? 0.0 : s.meta.score + 1":                  false,
		// the predicate proves nothing of what is summed
		"sum(map(filter(state.subs, .executed), .quality))":                    true,
		"sum(map(filter(state.subs, .executed || .quality != nil), .quality))": true,
		"sum(map(filter(state.subs, .note != nil), .quality))":                 true,
		"sum(map(filter(state.subs, .executed), .amount))":                     true,
		"sum(map(filter(state.subs, .quality == nil), .quality))":              true,
		"sum(map(filter(state.subs, .meta != nil), .meta.score))":              true,
		"sum(filter(state.qs, # == nil))":                                      true,
		"let s = find(state.subs, .executed); s == nil ? 0.0 : s.quality + 1":  true,
		"find(state.subs, .quality != nil).quality + 1":                        true,
		// the list filtered from keeps its nulls
		"let ran = filter(state.subs, .quality != nil); sum(map(state.subs, .quality)) + len(ran)": true,
	} {
		p, probs := expression.Compile(src, env, false)
		if p == nil {
			t.Errorf("%s: %+v", src, probs)
			continue
		}
		got := len(probs) > 0 && probs[0].Code == diag.CodeExprMayBeNil && probs[0].Warning
		if got != warns || !warns && len(probs) > 0 {
			t.Errorf("%s: %+v, want a null warning: %v", src, probs, warns)
		}
	}
}

// Every registered function has its type known to the checker: what it
// gives is checked where it is used (a list is no condition), and a
// value that may be null given to it is E004.
func TestRegisteredFunctionsAreTyped(t *testing.T) {
	env := typesEnv()
	for src, want := range map[string]string{
		"written_words(state.s ?? '')":  "condition is not boolean: it yields an array",
		"word_stems(state.s ?? '')":     "condition is not boolean: it yields an array",
		"fence(state.s ?? '')":          "condition is not boolean: it yields a string",
		"truncate(state.s ?? '', 3)":    "condition is not boolean: it yields a string",
		"len(fence(state.s ?? '')) > 3": "",
		"mentions(state.s ?? '', 'go')": "",
	} {
		p, probs := expression.Compile(src, env, true)
		switch {
		case want == "" && p == nil:
			t.Errorf("%s: %+v", src, probs)
		case want != "" && (p != nil || len(probs) != 1 || probs[0].Code != diag.CodeExprNotBool || probs[0].Message != want):
			t.Errorf("%s: %+v, want %q", src, probs, want)
		}
	}
	for _, src := range []string{"fence(state.s)", "truncate(state.s, 3)", "written_words(state.s)", "word_stems(state.s)"} {
		_, probs := expression.Compile(src, env, false)
		if len(probs) != 1 || probs[0].Code != diag.CodeExprMayBeNil {
			t.Errorf("%s: %+v, want E004 for state.s", src, probs)
		}
	}
}
