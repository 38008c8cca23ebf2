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

// Segment is literal text, or a hole.
type Segment struct {
	Text string
	Hole bool
}

// maxForms bounds the forms Forms lists; a template with more is not
// judged.
const maxForms = 64

// Forms lists the ways t can render: each if, with and else taken or
// not, a printed value a hole (a range's rounds and another template's
// text too), a printed literal its text. ok is false when there are too
// many to list.
func Forms(t *template.Template) (forms []Form, ok bool) {
	if t == nil || t.Tree == nil || t.Tree.Root == nil {
		return nil, false
	}
	out := formsOf(t.Tree.Root, []Form{{}})
	if len(out) == 0 || len(out) > maxForms {
		return nil, false
	}
	return out, true
}

// formsOf extends each form in prefix by what list can render.
func formsOf(list *parse.ListNode, prefix []Form) []Form {
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
				prefix = appendSeg(prefix, Segment{Hole: true})
			default:
				prefix = appendSeg(prefix, Segment{Hole: true})
			}
		case *parse.IfNode:
			prefix = branches(prefix, x.List, x.ElseList)
		case *parse.WithNode:
			prefix = branches(prefix, x.List, x.ElseList)
		default:
			// a range's rounds, another template's text: any text
			prefix = appendSeg(prefix, Segment{Hole: true})
		}
	}
	return prefix
}

func branches(prefix []Form, then, els *parse.ListNode) []Form {
	a := formsOf(then, clone(prefix))
	b := formsOf(els, clone(prefix))
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
		if n := len(f); n > 0 && s.Hole && f[n-1].Hole {
			continue // two holes are one
		}
		fs[i] = append(f, s)
	}
	return fs
}

// String shows the form, a hole as ….
func (f Form) String() string {
	var b strings.Builder
	for _, s := range f {
		if s.Hole {
			b.WriteString("…")
		} else {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// text is the form's text when it has no hole.
func (f Form) text() (string, bool) {
	var b strings.Builder
	for _, s := range f {
		if s.Hole {
			return "", false
		}
		b.WriteString(s.Text)
	}
	return b.String(), true
}

// matches reports whether some rendering of the form is text.
func (f Form) matches(text string) bool {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for _, s := range f {
		if s.Hole {
			b.WriteString(`.*`)
		} else {
			b.WriteString(regexp.QuoteMeta(s.Text))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	return err == nil && re.MatchString(text)
}

// Breaks says how the form certainly breaks the string rules of shape
// (its enum, pattern or lengths), "" when it may keep them: an enum no
// value of which it can render, a length its literal text alone exceeds,
// and for a form with no hole any rule its text breaks.
func (f Form) Breaks(shape *schema.Shape) string {
	if shape == nil {
		return ""
	}
	if text, whole := f.text(); whole {
		return shape.TextRule(text)
	}
	if values, ok := shape.Strings(); ok && !slices.ContainsFunc(values, f.matches) {
		q := make([]string, len(values))
		for i, v := range values {
			q[i] = strconv.Quote(v)
		}
		return "is one of " + strings.Join(q, ", ")
	}
	least := 0
	for _, s := range f {
		least += utf8.RuneCountInString(s.Text)
	}
	if shape.MaxLength != nil && least > *shape.MaxLength {
		return "is at most " + strconv.Itoa(*shape.MaxLength) + " characters long"
	}
	return ""
}
