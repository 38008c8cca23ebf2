package config_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
)

const doc = `a: 1
b: "two"
c: |
  first
  second
list: [x, "y"]
anchor: &t {k: v}
alias: *t
dup: 1
dup: 2
`

func TestValuePositionsAndPaths(t *testing.T) {
	var dl diag.List
	f := config.Parse("f.yaml", []byte(doc), &dl)
	if f == nil {
		t.Fatal(dl)
	}
	if len(dl) != 1 || dl[0].Code != diag.CodeDuplicate || dl[0].Line != 10 || dl[0].Path != "dup" {
		t.Fatalf("want one Y002 at line 10, got %v", dl)
	}
	root := f.Root()
	b := root.Get("b")
	if b.Text() != "two" || !b.IsString() || b.Pos().String() != "f.yaml:2:4" || b.Pos().EndCol != 9 {
		t.Fatalf("b: %q %v %+v", b.Text(), b.IsString(), b.Pos())
	}
	if a := root.Get("a"); a.IsString() || a.Text() != "1" {
		t.Fatalf("a reads as a string")
	}
	// a position inside a quoted scalar skips the quote
	if p := b.PosIn(1, 2, 3); p.Col != 6 || p.EndCol != 7 {
		t.Fatalf("inside b: %+v", p)
	}
	// a literal block's content starts on the next line, indented
	if p := root.Get("c").PosIn(2, 3, 0); p.Line != 5 || p.Col != 5 {
		t.Fatalf("inside c: %+v", p)
	}
	items := root.Get("list").Items()
	if len(items) != 2 || items[1].Path() != "list[1]" || items[1].Pos().Col != 11 {
		t.Fatalf("list: %v %q %+v", len(items), items[1].Path(), items[1].Pos())
	}
	// an alias reads as what it refers to
	if root.Get("alias").Get("k").Text() != "v" {
		t.Fatalf("alias not followed")
	}
	// a repeated key keeps its first value
	if root.Get("dup").Text() != "1" || len(root.Entries()) != 7 {
		t.Fatalf("dup: %q, %d entries", root.Get("dup").Text(), len(root.Entries()))
	}
	if k := root.KeyOf("list"); k.Pos().Line != 6 || k.Path() != "list" {
		t.Fatalf("key of list: %+v %q", k.Pos(), k.Path())
	}
	if ptr, ok := items[0].Pointer(); !ok || ptr != "/list/0" || !config.Same(f.At(ptr), items[0]) {
		t.Fatalf("pointer %q %v", ptr, ok)
	}
	var zero config.Value
	if zero.Exists() || zero.Get("x").Exists() || zero.Items() != nil || zero.Text() != "" {
		t.Fatal("the zero Value is not empty")
	}
}

func TestTextRegions(t *testing.T) {
	src := []byte("---\nmodel: m\n---\nHello {{.x}}\nsecond {{.y}}\n")
	f := config.Text("p.prompt", src)
	body := config.TextAt(f, 17)
	if !strings.HasPrefix(body.Text(), "Hello") {
		t.Fatalf("body %q", body.Text())
	}
	if p := body.Pos(); p.Line != 4 || p.Col != 1 {
		t.Fatalf("body at %+v", p)
	}
	// offset of "y" on the body's second line
	off := strings.Index(body.Text(), ".y") + 1
	if p := body.Span(off, 1); p.Line != 5 || p.Col != 11 || p.EndCol != 12 {
		t.Fatalf("span %+v", p)
	}
	if p := body.PosIn(2, 9, 0); p.Line != 5 || p.Col != 9 {
		t.Fatalf("pos in %+v", p)
	}
}

func TestParseReportsSyntaxAndAliasBombs(t *testing.T) {
	var dl diag.List
	if config.Parse("bad.yaml", []byte("a: [1\nb: 2\n"), &dl) != nil || len(dl) != 1 || dl[0].Code != diag.CodeYAML {
		t.Fatalf("syntax error: %v", dl)
	}
	dl = nil
	bomb := "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
		"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
	if config.Parse("bomb.yaml", []byte(bomb), &dl) != nil || len(dl) != 1 || !strings.Contains(dl[0].Summary, "expands to more than") {
		t.Fatalf("alias bomb: %v", dl)
	}
}

var fields = []config.Field{
	config.String("name", "A name.").Require(),
	config.Integer("count", "How many.").Min(1),
	config.Number("ratio", "A ratio.").Min(0).Max(1),
	config.Bool("on", "Switch."),
	config.Duration("wait", "How long."),
	config.Map("vars", "Variables.", config.Elem(config.Expression("", ""))),
	config.List("tags", "Tags.", config.Elem(config.String("", ""))).Distinct(),
	config.Object("retry", "Retry.", config.Integer("attempts", "Attempts.")),
	config.OneOf("mode", "Mode.", config.Const("off"), config.Object("", "", config.String("to", "Target."))),
}

func TestSettingsReadDeclaredFields(t *testing.T) {
	var dl diag.List
	f := config.Parse("s.yaml", []byte("name: x\ncount: 3\nratio: 0.5\non: true\nwait: 1m30s\nvars: {a: 'state.x'}\ntags: [p, q]\nretry: {attempts: 2}\nmode: {to: y}\n"), &dl)
	s := config.NewSettings(f.Root(), fields)
	if v, ok := s.String("name"); !ok || v != "x" {
		t.Fatalf("name %q", v)
	}
	if v, ok := s.Int("count"); !ok || v != 3 {
		t.Fatalf("count %d", v)
	}
	if v, ok := s.Float("ratio"); !ok || v != 0.5 {
		t.Fatalf("ratio %v", v)
	}
	if v, ok := s.Bool("on"); !ok || !v {
		t.Fatal("on")
	}
	if v, ok := s.Duration("wait"); !ok || v != 90*time.Second {
		t.Fatalf("wait %v", v)
	}
	if es := s.Entries("vars"); len(es) != 1 || es[0].Name != "a" || es[0].Value.Text() != "state.x" {
		t.Fatalf("vars %v", es)
	}
	if len(s.Items("tags")) != 2 {
		t.Fatal("tags")
	}
	if v, ok := s.Object("retry").Int("attempts"); !ok || v != 2 {
		t.Fatal("retry.attempts")
	}
	if v, _ := s.Object("mode").String("to"); v != "y" {
		t.Fatal("mode.to")
	}
	// absent and mistyped values read as absent
	if _, ok := config.NewSettings(f.Root().Get("retry"), fields).Int("count"); ok {
		t.Fatal("absent count read as present")
	}
	for _, misuse := range []func(){
		func() { s.String("nope") }, // not declared
		func() { s.Int("name") },    // declared as a string
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("reading an undeclared or mistyped setting did not panic")
				}
			}()
			misuse()
		}()
	}
}

func TestFieldSchema(t *testing.T) {
	b, err := json.Marshal(config.Object("", "A block.", fields...).Schema())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`"additionalProperties":false`, `"required":["name"]`,
		`"count":{"description":"How many.","minimum":1,"type":"integer"}`,
		`"ratio":{"description":"A ratio.","maximum":1,"minimum":0,"type":"number"}`,
		`"wait":{"$ref":"#/$defs/duration","description":"How long."}`,
		`"vars":{"additionalProperties":{"type":"string"},"description":"Variables.","type":"object"}`,
		`"tags":{"description":"Tags.","items":{"type":"string"},"type":"array","uniqueItems":true}`,
		`"mode":{"anyOf":[{"const":"off"},{"additionalProperties":false,"properties":{"to":`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("schema lacks %s:\n%s", want, b)
		}
	}
	table := config.Table(fields)
	for _, want := range []string{"| `name` | string | yes | A name. |", "| `retry.attempts` | integer |", "| `mode` | `off` or object |", "| `vars` | map of expression |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestFilesFromAnFS(t *testing.T) {
	fsys := fstest.MapFS{
		"flows/f.yaml":           {Data: []byte("x: 1")},
		"prompts/a/b.prompt":     {Data: []byte("hi")},
		"flows/prompts/c.prompt": {Data: []byte("hello")},
	}
	files := config.FS(fsys)
	if b, err := files.ReadFile("flows/f.yaml"); err != nil || string(b) != "x: 1" {
		t.Fatalf("read: %q %v", b, err)
	}
	if got := files.Join("flows", "../prompts/a/b.prompt"); got != "prompts/a/b.prompt" || !files.Exists(got) {
		t.Fatalf("join %q", got)
	}
	if up := files.Up("flows"); strings.Join(up, ",") != "flows,." {
		t.Fatalf("up %v", up)
	}
	var names []string
	for _, dir := range files.Up("flows") {
		root := files.Join(dir, "prompts")
		files.Walk(root, func(p string) { names = append(names, files.Rel(root, p)) })
	}
	if strings.Join(names, ",") != "c.prompt,a/b.prompt" {
		t.Fatalf("walk %v", names)
	}
	if _, err := files.ReadFile("../outside"); err == nil {
		t.Fatal("read outside the file system")
	}
	if u := files.URL("flows/x.json"); u != "file:///flows/x.json" {
		t.Fatalf("url %s", u)
	}
}

// A syntax error is placed on the line that is wrong, at its first
// character, not on the line of the construct the parser was in.
func TestSyntaxErrorPositions(t *testing.T) {
	cases := []struct {
		src       string
		line, col int
	}{
		// an unclosed flow mapping: its own line
		{"a: 1\nb:\n  c: {x: 1\nd: 2\n", 3, 3},
		// a key indented too deep: its line, not the mapping's first
		{"a:\n  b: 1\n  c: 2\n   d: 3\ne: 4\n", 4, 4},
		// a list item's key out of place
		{"a:\n  - {x: 1}\n  - y: 1\n    z: 2\n  w: 3\n", 5, 3},
		// an unclosed quote
		{"a: 1\nb: \"x\nc: 2\n", 2, 1},
		// a tab
		{"a:\n\tb: 1\n", 2, 1},
		// a valid multi-line flow mapping and block scalar before the mistake
		{"a: |\n  t\n  u\nb: {x: 1,\n  y: 2}\nc: {z: 1\nd: 2\n", 6, 1},
		// a mapping value where none is allowed
		{"a: 1\nb: c: d\n", 2, 1},
		// an unclosed flow sequence at the end
		{"a: 1\nb: [x\n", 2, 1},
	}
	for _, c := range cases {
		var dl diag.List
		if config.Parse("bad.yaml", []byte(c.src), &dl) != nil || len(dl) != 1 || dl[0].Code != diag.CodeYAML {
			t.Fatalf("%q: %v", c.src, dl)
		}
		if dl[0].Line != c.line || dl[0].Col != c.col {
			t.Errorf("%q: at %d:%d (%s), want %d:%d", c.src, dl[0].Line, dl[0].Col, dl[0].Summary, c.line, c.col)
		}
	}
}

// A value that does not decode says why in yaml.v3's words, without the
// heading yaml.v3 puts before its list of them.
func TestDecodeErrorSaysWhy(t *testing.T) {
	var dl diag.List
	f := config.Parse("f.yaml", []byte(doc), &dl)
	var n int
	err := f.Root().Get("b").Decode(&n)
	if err == nil || err.Error() != "line 2: cannot unmarshal !!str `two` into int" {
		t.Fatalf("got %v", err)
	}
}
