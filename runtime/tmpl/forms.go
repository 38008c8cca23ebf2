package tmpl

import (
	"math"
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
	// Source is the shape of the text a hole prints, when it is a text
	// field's.
	Source *schema.Shape
	// Most is the most characters a hole prints, when known (0: not
	// known).
	Most int
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
	out := fs.of(t.Tree.Root, []Form{{}}, scope{dot: []string{}, notNull: map[string]bool{}})
	if len(out) == 0 || len(out) > maxForms {
		return nil, false
	}
	return out, true
}

// formStep lists forms, resolving printed fields.
type formStep struct{ resolve Resolver }

// scope is where a template's action is: the chain of fields its dot
// is (nil when not known; empty at the data's root), and the chains an
// enclosing if or with found not null.
type scope struct {
	dot     []string
	notNull map[string]bool
}

// at is the scope inside a with on the chain idents (nil: not known).
func (sc scope) at(idents []string) scope {
	out := scope{dot: idents, notNull: map[string]bool{}}
	for k := range sc.notNull {
		out.notNull[k] = true
	}
	if idents != nil {
		out.notNull[strings.Join(idents, ".")] = true
	}
	return out
}

// chain is the chain of fields arg reads from the data's root (nil when
// not known).
func (sc scope) chain(arg parse.Node) []string {
	switch x := arg.(type) {
	case *parse.FieldNode:
		if sc.dot != nil {
			return append(slices.Clone(sc.dot), x.Ident...)
		}
	case *parse.DotNode:
		if len(sc.dot) > 0 {
			return sc.dot
		}
	case *parse.VariableNode:
		if x.Ident[0] == "$" && len(x.Ident) > 1 {
			return x.Ident[1:]
		}
	}
	return nil
}

// tested is the chain a pipeline of an if or a with is, alone (nil
// when it is anything else).
func (sc scope) tested(p *parse.PipeNode) []string {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return nil
	}
	return sc.chain(p.Cmds[0].Args[0])
}

// hole is the segment a printed argument makes.
func (fs formStep) hole(arg parse.Node, sc scope) Segment {
	idents := sc.chain(arg)
	if fs.resolve == nil || len(idents) == 0 {
		return Segment{Hole: true}
	}
	s := fs.resolve(idents)
	if s != nil && sc.notNull[strings.Join(idents, ".")] {
		s = s.WithoutNull() // inside a with or an if on it
	}
	if s == nil || s.MayBeNull() {
		return Segment{Hole: true}
	}
	return shapeHole(s)
}

// shapeHole is the hole a printed value of shape s makes.
func shapeHole(s *schema.Shape) Segment {
	if values, ok := s.Strings(); ok {
		q := make([]string, len(values))
		least, most := -1, 0
		for i, v := range values {
			q[i] = regexp.QuoteMeta(v)
			n := utf8.RuneCountInString(v)
			if least < 0 || n < least {
				least = n
			}
			most = max(most, n)
		}
		return Segment{Hole: true, Pattern: "(?:" + strings.Join(q, "|") + ")", Least: max(least, 0), Values: values, Most: max(most, 1)}
	}
	switch {
	case s.Is("integer"):
		most := 0
		if s.Minimum != nil && s.Maximum != nil {
			most = max(len(strconv.FormatFloat(math.Ceil(*s.Minimum), 'f', -1, 64)), len(strconv.FormatFloat(math.Floor(*s.Maximum), 'f', -1, 64)))
		}
		return Segment{Hole: true, Pattern: `-?[0-9]+`, Least: 1, Kind: "an integer", Most: most}
	case s.Is("number"):
		return Segment{Hole: true, Pattern: `[-+0-9.eE]+|NaN|[-+]?Inf`, Least: 1, Kind: "a number"}
	case s.Is("boolean"):
		return Segment{Hole: true, Pattern: `(?:true|false)`, Least: 4, Values: []string{"true", "false"}, Most: 5}
	case s.Is("string"):
		most := 0
		if s.MaxLength != nil {
			most = max(*s.MaxLength, 1)
		}
		return Segment{Hole: true, Least: s.MinLength, Source: s, Most: most}
	}
	return Segment{Hole: true}
}

// Most is the most characters the form prints, -1 when not known.
func (f Form) Most() int {
	n := 0
	for _, s := range f {
		switch {
		case !s.Hole:
			n += utf8.RuneCountInString(s.Text)
		case s.Most <= 0 && !(s.Values != nil):
			return -1
		default:
			n += s.Most
		}
	}
	return n
}

// Keeps reports whether every text the form prints keeps the text rules
// of shape: it prints one text field alone, whose own rules are as
// strict.
func (f Form) Keeps(shape *schema.Shape) bool {
	var only *Segment
	for i := range f {
		switch {
		case f[i].Hole && only == nil:
			only = &f[i]
		case f[i].Hole || f[i].Text != "":
			return false
		}
	}
	return only != nil && only.Source != nil && only.Source.KeepsText(shape)
}

// of extends each form in prefix by what list can render in scope sc.
func (fs formStep) of(list *parse.ListNode, prefix []Form, sc scope) []Form {
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
				prefix = appendSeg(prefix, fs.hole(x.Pipe.Cmds[0].Args[0], sc))
			case len(x.Pipe.Cmds) == 1 && len(x.Pipe.Cmds[0].Args) == 2 && isIdent(x.Pipe.Cmds[0].Args[0], "len"):
				// len prints an integer, as long as what it measures
				// allows
				hole := Segment{Hole: true, Pattern: `[0-9]+`, Least: 1, Kind: "an integer"}
				if idents := sc.chain(x.Pipe.Cmds[0].Args[1]); fs.resolve != nil && idents != nil {
					if m := fs.resolve(idents); m != nil {
						switch {
						case m.MaxLength != nil:
							hole.Most = len(strconv.Itoa(*m.MaxLength * 4)) // bytes
						case m.MaxItems != nil:
							hole.Most = len(strconv.Itoa(*m.MaxItems))
						}
					}
				}
				prefix = appendSeg(prefix, hole)
			default:
				prefix = appendSeg(prefix, Segment{Hole: true})
			}
		case *parse.IfNode:
			then := sc.at(sc.dot)
			if t := sc.tested(x.Pipe); t != nil {
				then.notNull[strings.Join(t, ".")] = true
			}
			prefix = fs.branches(prefix, x.List, x.ElseList, then, sc)
		case *parse.WithNode:
			prefix = fs.branches(prefix, x.List, x.ElseList, sc.at(sc.tested(x.Pipe)), sc)
		default:
			// a range's rounds, another template's text: any text
			prefix = appendSeg(prefix, Segment{Hole: true})
		}
	}
	return prefix
}

func (fs formStep) branches(prefix []Form, then, els *parse.ListNode, thenScope, elseScope scope) []Form {
	a := fs.of(then, clone(prefix), thenScope)
	b := fs.of(els, clone(prefix), elseScope)
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

func isIdent(n parse.Node, name string) bool {
	id, ok := n.(*parse.IdentifierNode)
	return ok && id.Ident == name
}
