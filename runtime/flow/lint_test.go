package flow_test

import (
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// lint.ignore drops the warnings of the codes it lists, and only
// warnings; a listed code that is unknown, or that the flow does not
// raise, is reported.
func TestLintIgnore(t *testing.T) {
	base := `version: 1
name: lint
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      o: {type: object, properties: {text: {type: string}}, default: {}}
      out: {type: string, default: ""}
nodes:
  a: {kind: set, set: {out: "state.o.txt ?? ''"}}
  b: {kind: set, set: {n: "1"}}
edges:
  - {from: START, to: a}
  - from: a
    branch:
      - {when: "state.n > 1", to: b}
  - {from: b, to: END}
LINT`
	load := func(lint string) diag.List {
		_, dl := flow.LoadSource("lint.yaml", []byte(strings.Replace(base, "LINT", lint, 1)), kindtest.Registry())
		return dl
	}
	codes := func(dl diag.List) string {
		var out []string
		for _, d := range dl {
			out = append(out, d.Severity.String()+" "+string(d.Code))
		}
		return strings.Join(out, ", ")
	}
	cases := map[string]string{
		"":                                   "warning E003, warning G013",
		"lint: {ignore: [G013]}":             "warning E003",
		"lint: {ignore: [G013, E003]}":       "",
		"lint: {ignore: [G013, E003, G001]}": "warning S005",
		"lint: {ignore: [G031]}":             "warning E003, warning G013, error S005",
	}
	for lint, want := range cases {
		dl := load(lint)
		if got := codes(dl); got != want {
			t.Errorf("%q: %s, want %s", lint, got, want)
		}
	}
	if dl := load("lint: {ignore: [G031]}"); !strings.Contains(dl[len(dl)-1].Message(), `did you mean "G001"?`) {
		t.Errorf("an unknown code: %v", dl)
	}
	// an error is reported whatever the flow lists
	_, dl := flow.LoadSource("lint.yaml", []byte(strings.Replace(strings.Replace(base, "LINT", "lint: {ignore: [E003]}", 1),
		`"state.o.txt ?? ''"`, `"state.nope"`, 1)), kindtest.Registry())
	if !dl.HasErrors() || !strings.Contains(codes(dl), "error E003") {
		t.Errorf("an ignored code's error: %s", codes(dl))
	}
}

// A route that reads an enum field: a value without a choice (null too)
// is an error unless there is a default; a choice no value leads to is a
// warning.
func TestRouteOverAnEnum(t *testing.T) {
	base := `version: 1
name: r
state:
  schema:
    type: object
    properties:
      next: {type: string, enum: [b, c], default: b}
      only: {type: [string, "null"], enum: [b, null], default: null}
nodes:
  a: {kind: set, set: {next: "'c'"}}
  b: {kind: set, set: {next: "'b'"}}
  c: {kind: set, set: {next: "'b'"}}
edges:
  - {from: START, to: a}
  - {from: a, ROUTE}
  - {from: b, to: END}
  - {from: c, to: END}
`
	cases := map[string]string{
		`route: "state.next", choices: [b, c]`:             "",
		`route: "state.next", choices: [b]`:                "error G003, error G014", // c is unreachable too
		`route: "state.next", choices: [b], default: b`:    "error G003",
		`route: "state.only", choices: [b, c]`:             "error G012, warning G014", // null has no choice
		`route: "state.only", choices: [b, c], default: b`: "warning G014",
		`route: "state.only ?? 'c'", choices: [b, c]`:      "",
	}
	for route, want := range cases {
		src := strings.Replace(base, "ROUTE", route, 1)
		_, dl := flow.LoadSource("r.yaml", []byte(src), kindtest.Registry())
		var got []string
		for _, d := range dl {
			got = append(got, d.Severity.String()+" "+string(d.Code))
		}
		if g := strings.Join(got, ", "); g != want {
			t.Errorf("%s: %s, want %s\n%v", route, g, want, dl)
		}
	}
}

// Type flow: a value whose shape is declared is checked against the
// schema of the field it is written to, member by member.
func TestTypeFlow(t *testing.T) {
	src := `version: 1
name: flow
state:
  schema:
    type: object
    properties:
      draft:
        type: object
        properties: {name: {type: string}, age: {type: string}, note: {type: string}, level: {enum: [low, mid, high]}}
        default: {name: x, age: "1"}
      profile:
        type: object
        additionalProperties: false
        required: [name, age]
        properties: {name: {type: string}, age: {type: integer}, level: {enum: [low, high]}}
        default: {name: x, age: 1}
      same:
        type: object
        properties: {name: {type: string}, age: {type: string}}
        default: {}
      people: {type: array, items: {type: object, required: [name], properties: {name: {type: string}}}, default: []}
      more: {type: array, items: {type: object, required: [name], properties: {name: {type: integer}}}, default: []}
  reducers:
    people: append
nodes:
  a: {kind: set, set: {profile: "state.draft", same: "state.draft", people: "state.more"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`
	_, dl := flow.LoadSource("flow.yaml", []byte(src), kindtest.Registry())
	got := diagLines(dl)
	want := []string{
		`flow.yaml:26:33: error[W004]: field "profile" cannot hold what this expression gives: state.draft may lack "name", which the field requires; ` +
			`state.draft may lack "age", which the field requires; state.draft.age is string, where the field takes integer; ` +
			`state.draft.level may be "mid", which the field's enum ("low", "high") does not list; ` +
			`state.draft has "note", which the field does not declare (additionalProperties: false)`,
		`flow.yaml:26:77: error[W004]: the items of field "people" cannot hold what this expression gives: state.more[].name is integer, where the field takes string`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Definite assignment: a read of a field with no default is reported
// with a path that reaches it unwritten; exclusive branches that both
// write it, a writer on every path, an edge reading its own node's write,
// ?? and nil tests are not.
func TestDefiniteAssignment(t *testing.T) {
	head := `version: 1
name: da
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      v: {type: string}
      out: {type: string, default: ""}
nodes:
`
	cases := []struct{ name, body, want string }{
		{"both exclusive branches write", `  a: {kind: set, set: {n: "1"}}
  b: {kind: set, set: {v: "'b'"}}
  c: {kind: set, set: {v: "'c'"}}
  d: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: a}
  - from: a
    branch:
      - {when: "state.n > 0", to: b}
      - else: c
  - {from: b, to: d}
  - {from: c, to: d}
  - {from: d, to: END}
`, ""},
		{"a parallel sibling writes it", `  a: {kind: set, set: {v: "'a'"}}
  b: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: [a, b]}
  - {from: a, to: END}
  - {from: b, to: END}
`, "da.yaml:12:36: warning[E006]: state.v may be unset here: it has no default, and START → [a, b] reaches this node with nothing written to it (a writes it in the same step, which this node does not see); give it a default, or read it as state.v ?? a value"},
		{"a join waits for the writer", `  split: {kind: set, set: {n: "1"}}
  a: {kind: set, set: {v: "'a'"}}
  b: {kind: set, set: {n: "2"}}
  c: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: split}
  - {from: split, to: [a, b]}
  - {from: [a, b], to: c}
  - {from: c, to: END}
`, ""},
		{"a join waits for a writer on a longer arm", `  split: {kind: set, set: {n: "1"}}
  a: {kind: set, set: {n: "2"}}
  x: {kind: set, set: {out: "'x'"}}
  b: {kind: set, set: {v: "'b'"}}
  c: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: split}
  - {from: split, to: [a, x]}
  - {from: x, to: b}
  - {from: [a, b], to: c}
  - {from: c, to: END}
`, ""},
		{"the first round of a loop reads before the write", `  a: {kind: set, set: {out: "state.v", n: "state.n + 1"}}
  b: {kind: set, set: {v: "'b'"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - from: b
    bound: 3
    branch:
      - {when: "state.n < 3", to: a}
      - else: END
`, "da.yaml:11:36: warning[E006]: state.v may be unset here: it has no default, and START → a reaches this node with nothing written to it (b writes it, but this way does not pass b)"},
		{"a write the loop makes before the read, every round", `  a: {kind: set, set: {v: "'a'", n: "state.n + 1"}}
  b: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - from: b
    bound: 3
    branch:
      - {when: "state.n < 3", to: a}
      - else: END
`, ""},
		{"on_error.set writes only on failure", `  a: {kind: fail, times: 1, set: {n: "1"}, on_error: {set: {v: "'failed'"}}}
  b: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: END}
`, "da.yaml:12:36: warning[E006]: state.v may be unset here: it has no default, and START → a → b reaches this node with nothing written to it (a writes it only when it fails (on_error.set)); give it a default, or read it as state.v ?? a value"},
		{"an error route skips the writes", `  a: {kind: set, set: {v: "'a'"}, on_error: {route: c}}
  b: {kind: set, set: {out: "state.v"}}
  c: {kind: set, set: {out: "state.v"}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: END}
  - {from: c, to: END}
`, "da.yaml:13:36: warning[E006]: state.v may be unset here: it has no default, and START → a → c reaches this node with nothing written to it"},
		{"a sibling's write is seen by an edge after the step", `  split: {kind: set, set: {n: "1"}}
  a: {kind: set, set: {v: "'a'"}}
  b: {kind: set, set: {n: "2"}}
  c: {kind: set, set: {out: "'c'"}}
edges:
  - {from: START, to: split}
  - {from: split, to: [a, b]}
  - {from: a, to: END}
  - from: b
    branch:
      - {when: "state.v == 'a'", to: c}
      - else: END
  - {from: c, to: END}
`, ""},
		{"an edge reads its node's write", `  a: {kind: set, set: {v: "'a'"}}
  b: {kind: set, set: {out: "'b'"}}
edges:
  - {from: START, to: a}
  - from: a
    branch:
      - {when: "state.v == 'a'", to: b}
      - else: END
  - {from: b, to: END}
`, ""},
		{"guarded reads", `  a: {kind: set, set: {out: "state.v ?? 'none'", n: "state.v != nil ? len(state.v) : 0"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`, ""},
		{"nobody writes it", `  a: {kind: set, set: {out: "state.v + '!'"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`, "da.yaml:11:36: warning[E006]: state.v may be unset here: it has no default, and START → a reaches this node with nothing written to it (no node writes it); give it a default, or read it as state.v ?? a value"},
	}
	for _, c := range cases {
		_, dl := flow.LoadSource("da.yaml", []byte(head+c.body), kindtest.Registry())
		got := diagLines(dl)
		text := strings.Join(got, "\n")
		if c.want == "" && text != "" || c.want != "" && !strings.HasPrefix(text, c.want) || len(got) > 1 {
			t.Errorf("%s:\n got %s\nwant %s", c.name, text, c.want)
		}
	}
}

// A cached node's key must cover what the node reads: each value it
// leaves out is named, with the fix, and a field the node advances from
// its own value is called out.
func TestCacheKeyCoversReads(t *testing.T) {
	head := `version: 1
name: cached
state:
  schema:
    type: object
    properties:
      a: {type: string, default: ""}
      b: {type: string, default: ""}
      n: {type: integer, default: 0}
input: [a]
nodes:
`
	tail := `edges:
  - {from: START, to: x}
  - {from: x, to: END}
`
	for _, c := range []struct{ node, want string }{
		{`  x: {kind: set, cache: {key: "state.a"}, set: {b: "state.a + '!'"}}`, ""},
		{`  x: {kind: set, cache: {key: "[state.a, state.b]"}, set: {b: "state.a + state.b"}}`, ""},
		{`  x: {kind: set, cache: {key: "json(state)"}, set: {b: "state.a + state.b"}}`, ""},
		{`  x: {kind: set, cache: {key: "state.a"}, set: {b: "state.a + state.b"}}`, `leaves out state.b, which the node reads`},
		{`  x: {kind: set, cache: {key: "state.a"}, set: {n: "state.n + 1"}}`, `the node writes state.n from its own value`},
		{`  x: {kind: set, cache: {key: "state.a"}, set: {b: "input.a ?? ''"}}`, `leaves out input.a`},
		{`  x: {kind: set, cache: {key: "state.b"}, set: {b: "state.a != '' ? 'y' : 'n'"}}`, `such as key: "[state.b, state.a]"`},
	} {
		_, dl := flow.LoadSource("cached.yaml", []byte(head+c.node+"\n"+tail), kindtest.Registry())
		var got []string
		for _, d := range dl {
			got = append(got, d.String()+" "+d.Detail)
		}
		text := strings.Join(got, "\n")
		if c.want == "" && text != "" || c.want != "" && (len(dl) != 1 || dl[0].Code != diag.CodeCacheKey || !strings.Contains(text, c.want)) {
			t.Errorf("%s:\n got %s\nwant %s", c.node, text, c.want)
		}
	}
}

// A choice whose branches differ in type, into a field with a reducer:
// each branch is judged as the whole would be (the whole is typed any),
// a branch the reducer refuses is an error at its column, and one it
// takes is not.
func TestReducedChoiceBranches(t *testing.T) {
	src := `version: 1
name: flow
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0}
      log: {type: array, items: {type: [string, integer]}, default: []}
  reducers:
    n: add
    log: append
nodes:
  a: {kind: set, set: {n: "false ? 0 : 0 > 1", log: "state.n > 0 ? 'many' : 1"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`
	_, dl := flow.LoadSource("flow.yaml", []byte(src), kindtest.Registry())
	got := diagLines(dl)
	want := `flow.yaml:13:42: error[W004]: field "n" takes a number (add), but this branch yields a boolean`
	if strings.Join(got, "\n") != want {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

// diagLines is each diagnostic as the command line prints it.
func diagLines(dl diag.List) []string {
	var out []string
	for _, d := range dl {
		out = append(out, d.String())
	}
	return out
}
