package tmpl

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"

	"github.com/trellisflow/trellis/runtime/schema"
)

// Form is one way a template can render: its literal text, with holes
// where it prints a value it reads (of any text).
type Form []Segment

// Segment is literal text, or a hole: a printed value, of any text
// unless Pattern (a regular expression) says what its kind prints (an
// integer's digits, a boolean's true or false, a string enum's values);
// Least is the fewest characters it prints.
type Segment struct {
	Text    string
	Hole    bool
	Pattern string
	Least   int
	// Values lists every text the hole can print, when they are few (a
	// string enum's values, a boolean's).
	Values []string
	// Kind names what a typed hole prints (a number), for messages.
	Kind string
}

// Resolver gives the shape of a chain of fields from the template's data
// (state.x.y), nil when it is not known.
type Resolver func(idents []string) *schema.Shape

// maxForms bounds the forms Forms lists; a template with more is not
// judged.
const maxForms = 64

// Forms lists the ways t can render: each if, with and else taken or
// not, a printed value a hole (a range's rounds and another template's
// text too), a printed literal its text. ok is false when there are too
// many to list.
func Forms(t *template.Template) (forms []Form, ok bool) { return FormsOf(t, nil) }

// FormsOf is Forms where a printed field's kind, given by resolve, says
// what its hole can print.
func FormsOf(t *template.Template, resolve Resolver) (forms []Form, ok bool) {
	if t == nil || t.Tree == nil || t.Tree.Root == nil {
		return nil, false
	}
	fs := formStep{resolve: resolve}
	out := fs.of(t.Tree.Root, []Form{{}}, true)
	if len(out) == 0 || len(out) > maxForms {
		return nil, false
	}
	return out, true
}

// formStep lists forms, resolving printed fields.
type formStep struct{ resolve Resolver }

// hole is the segment a printed argument makes; atRoot: dot is the
// template's data.
func (fs formStep) hole(arg parse.Node, atRoot bool) Segment {
	var idents []string
	switch x := arg.(type) {
	case *parse.FieldNode:
		if atRoot {
			idents = x.Ident
		}
	case *parse.VariableNode:
		if x.Ident[0] == "$" {
			idents = x.Ident[1:]
		}
	}
	if fs.resolve == nil || len(idents) == 0 {
		return Segment{Hole: true}
	}
	s := fs.resolve(idents)
	if s == nil || s.Nullable() {
		return Segment{Hole: true}
	}
	if values, ok := s.Strings(); ok {
		q := make([]string, len(values))
		least := -1
		for i, v := range values {
			q[i] = regexp.QuoteMeta(v)
			if n := utf8.RuneCountInString(v); least < 0 || n < least {
				least = n
			}
		}
		return Segment{Hole: true, Pattern: "(?:" + strings.Join(q, "|") + ")", Least: max(least, 0), Values: values}
	}
	switch {
	case s.Is("integer"):
		return Segment{Hole: true, Pattern: `-?[0-9]+`, Least: 1, Kind: "an integer"}
	case s.Is("number"):
		return Segment{Hole: true, Pattern: `[-+0-9.eE]+|NaN|[-+]?Inf`, Least: 1, Kind: "a number"}
	case s.Is("boolean"):
		return Segment{Hole: true, Pattern: `(?:true|false)`, Least: 4, Values: []string{"true", "false"}}
	}
	return Segment{Hole: true}
}

// of extends each form in prefix by what list can render; atRoot: dot is
// the template's data there.
func (fs formStep) of(list *parse.ListNode, prefix []Form, atRoot bool) []Form {
	if list == nil {
		return prefix
	}
	for _, n := range list.Nodes {
		if len(prefix) > maxForms {
			return prefix
		}
		switch x := n.(type) {
		case *parse.TextNode:
			prefix = appendSeg(prefix, Segment{Text: string(x.Text)})
		case *parse.CommentNode:
		case *parse.ActionNode:
			switch {
			case len(x.Pipe.Decl) > 0:
				// a declaration prints nothing
			case len(x.Pipe.Cmds) == 1 && len(x.Pipe.Cmds[0].Args) == 1:
				if s, ok := x.Pipe.Cmds[0].Args[0].(*parse.StringNode); ok {
					prefix = appendSeg(prefix, Segment{Text: s.Text})
					continue
				}
				prefix = appendSeg(prefix, fs.hole(x.Pipe.Cmds[0].Args[0], atRoot))
			default:
				prefix = appendSeg(prefix, Segment{Hole: true})
			}
		case *parse.IfNode:
			prefix = fs.branches(prefix, x.List, x.ElseList, atRoot, atRoot)
		case *parse.WithNode:
			prefix = fs.branches(prefix, x.List, x.ElseList, false, atRoot)
		default:
			// a range's rounds, another template's text: any text
			prefix = appendSeg(prefix, Segment{Hole: true})
		}
	}
	return prefix
}

func (fs formStep) branches(prefix []Form, then, els *parse.ListNode, thenRoot, elseRoot bool) []Form {
	a := fs.of(then, clone(prefix), thenRoot)
	b := fs.of(els, clone(prefix), elseRoot)
	return append(a, b...)
}

func clone(fs []Form) []Form {
	out := make([]Form, len(fs))
	for i, f := range fs {
		out[i] = slices.Clone(f)
	}
	return out
}

func appendSeg(fs []Form, s Segment) []Form {
	for i, f := range fs {
		if n := len(f); n > 0 && !s.Hole && !f[n-1].Hole {
			f[n-1].Text += s.Text
			fs[i] = f
			continue
		}
		if n := len(f); n > 0 && s.Hole && f[n-1].Hole && s.Pattern == "" && f[n-1].Pattern == "" {
			continue // two holes of any text are one
		}
		fs[i] = append(f, s)
	}
	return fs
}

// String shows the form, a hole as … (or, printing a number, as <a
// number>).
func (f Form) String() string {
	var b strings.Builder
	for _, s := range f {
		if s.Hole && s.Kind != "" {
			b.WriteString("<" + s.Kind + ">")
		} else if s.Hole {
			b.WriteString("…")
		} else {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// Least is the fewest characters the form renders: its literal text and
// the shortest each hole prints.
func (f Form) Least() int {
	least := 0
	for _, s := range f {
		least += utf8.RuneCountInString(s.Text) + s.Least
	}
	return least
}

// Open reports whether the form prints something whose text the
// validator cannot know (a string field with no enum, a function's
// result), which may then be any text at all.
func (f Form) Open() bool {
	for _, s := range f {
		if s.Hole && s.Pattern == "" {
			return true
		}
	}
	return false
}

// texts lists every text the form can print, when each of its holes
// lists its values and they are few.
func (f Form) texts() ([]string, bool) {
	out := []string{""}
	for _, s := range f {
		if s.Hole && s.Values == nil {
			return nil, false
		}
		vals := []string{s.Text}
		if s.Hole {
			vals = s.Values
		}
		var next []string
		for _, p := range out {
			for _, v := range vals {
				next = append(next, p+v)
			}
		}
		if out = next; len(out) > maxForms {
			return nil, false
		}
	}
	return out, true
}

// matches reports whether some rendering of the form is text.
func (f Form) matches(text string) bool {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for _, s := range f {
		switch {
		case s.Hole && s.Pattern != "":
			b.WriteString("(?:" + s.Pattern + ")")
		case s.Hole:
			b.WriteString(`.*`)
		default:
			b.WriteString(regexp.QuoteMeta(s.Text))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(text)
}

// Breaks says how the form certainly breaks the string rules of shape
// (its enum, pattern or lengths), "" when it may keep them, and a text
// it can render that shows it: an enum no value of which it can render, a
// length its literal text alone exceeds, and for a form whose every text
// is known (no hole, or holes of few values) any rule one of them breaks.
func (f Form) Breaks(shape *schema.Shape) (why, shown string) {
	if shape == nil {
		return "", ""
	}
	if texts, ok := f.texts(); ok {
		for _, t := range texts {
			if why := shape.TextRule(t); why != "" {
				return why, t
			}
		}
		return "", ""
	}
	if values, ok := shape.Strings(); ok && !slices.ContainsFunc(values, f.matches) {
		q := make([]string, len(values))
		for i, v := range values {
			q[i] = strconv.Quote(v)
		}
		return "is one of " + strings.Join(q, ", "), f.String()
	}
	if least := f.Least(); shape.MaxLength != nil && least > *shape.MaxLength {
		return "is at most " + strconv.Itoa(*shape.MaxLength) + " characters long", f.String()
	}
	return "", ""
}
