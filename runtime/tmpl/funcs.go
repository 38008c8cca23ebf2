// The signatures of the functions templates call: what each takes and
// gives, checked against what a template gives it as expressions'
// functions are, and printf's verbs against its values.

package tmpl

import (
	"fmt"
	"strings"
	"text/template/parse"

	"github.com/trellisflow/trellis/runtime/schema"
)

// param is what a function takes for one argument.
type param int

const (
	anything  param = iota
	text            // a string
	whole           // an int
	list            // a list; null is none (anything else renders nothing)
	sized           // a string, a list or an object (len)
	indexable       // a list or an object (index)
	sliceable       // a string or a list (slice)
)

// signature is a function's parameters (rest repeats for the arguments
// past them) and what it gives.
type signature struct {
	params []param
	rest   param
	more   bool // takes more arguments than params, each a rest
	result *schema.Shape
}

func shapeOf(types ...string) *schema.Shape { return schema.Of(types...) }

var signatures = map[string]signature{
	"upper":    {params: []param{text}, result: shapeOf("string")},
	"lower":    {params: []param{text}, result: shapeOf("string")},
	"trim":     {params: []param{text}, result: shapeOf("string")},
	"join":     {params: []param{text, list}, result: shapeOf("string")},
	"first":    {params: []param{whole, list}},
	"last":     {params: []param{whole, list}},
	"len":      {params: []param{sized}, result: shapeOf("integer")},
	"index":    {params: []param{indexable}, rest: anything, more: true},
	"slice":    {params: []param{sliceable}, rest: whole, more: true},
	"printf":   {params: []param{text}, rest: anything, more: true, result: shapeOf("string")},
	"print":    {rest: anything, more: true, result: shapeOf("string")},
	"println":  {rest: anything, more: true, result: shapeOf("string")},
	"json":     {params: []param{anything}, result: shapeOf("string")},
	"yaml":     {params: []param{anything}, result: shapeOf("string")},
	"html":     {rest: anything, more: true, result: shapeOf("string")},
	"js":       {rest: anything, more: true, result: shapeOf("string")},
	"urlquery": {rest: anything, more: true, result: shapeOf("string")},
	"not":      {params: []param{anything}, result: shapeOf("boolean")},
}

// value is an argument as a function receives it: its shape (nil when
// unknown), how to name it, and whether it came through the pipeline.
type value struct {
	shape *schema.Shape
	what  string
	// path is the data it reads (state.x), for judging a null with the
	// graph.
	path string
	// literal: written in the template, its value known
	literal bool
}

// argValue is what the template gives a function for arg.
func argValue(arg parse.Node, s *schema.Shape) value {
	switch x := arg.(type) {
	case *parse.NumberNode:
		if x.IsInt {
			return value{shape: shapeOf("integer"), what: x.Text, literal: true}
		}
		return value{shape: shapeOf("number"), what: x.Text, literal: true}
	case *parse.StringNode:
		return value{shape: shapeOf("string"), what: x.Quoted, literal: true}
	case *parse.BoolNode:
		return value{shape: shapeOf("boolean"), what: x.String(), literal: true}
	case *parse.NilNode:
		return value{shape: shapeOf("null"), what: "nil", literal: true}
	case *parse.FieldNode:
		return value{shape: s, what: arg.String(), path: strings.TrimPrefix(arg.String(), ".")}
	case *parse.VariableNode, *parse.ChainNode:
		return value{shape: s, what: arg.String()}
	}
	return value{shape: s, what: arg.String()}
}

// call checks the arguments of function fn (the command's first
// identifier) and returns the shape of what it gives (nil: unknown).
func (c *checker) call(fn string, cmd *parse.CommandNode, args []value) *schema.Shape {
	sig, ok := signatures[fn]
	if !ok {
		return nil
	}
	at := int(cmd.Args[0].Position())
	for i, a := range args {
		p := sig.rest
		switch {
		case i < len(sig.params):
			p = sig.params[i]
		case !sig.more:
			return sig.result // too many arguments: text/template says so when it parses
		}
		c.takes(fn, at, p, a)
	}
	if fn == "printf" && len(cmd.Args) > 1 {
		if f, ok := cmd.Args[1].(*parse.StringNode); ok {
			c.printf(at, f.Text, args[1:])
		}
	}
	switch fn {
	case "first", "last":
		if len(args) == 2 && args[1].shape.Known() && args[1].shape.WithoutNull().Is("array") {
			return args[1].shape.WithoutNull()
		}
	case "index":
		if len(args) >= 2 && args[0].shape.Known() {
			if s := args[0].shape.WithoutNull(); s.Is("array") && s.Items != nil {
				return s.Items
			}
		}
	}
	return sig.result
}

// takes checks one argument against what the function takes there.
func (c *checker) takes(fn string, at int, p param, a value) {
	s := a.shape
	if p == anything || !s.Known() {
		return
	}
	if p == list && s.MayBeNull() {
		s = s.WithoutNull() // (null is no items)
	}
	if s.IsNull() {
		c.probs = append(c.probs, Problem{Offset: at, Len: len(fn), Call: true,
			Message: fmt.Sprintf("%s takes %s, but %s is null: the template fails when it renders", fn, paramWords[p], a.what)})
		return
	}
	if s.MayBeNull() {
		c.probs = append(c.probs, Problem{Offset: at, Len: len(fn), Call: true, MayBeNull: true, Path: a.path,
			Message: fmt.Sprintf("%s takes %s, but %s may be null, which fails when the template renders; read it inside a with or an if on it", fn, paramWords[p], a.what)})
		return
	}
	if !s.Known() {
		return
	}
	nn := s.WithoutNull()
	var fits bool
	switch p {
	case text:
		fits = nn.Is("string") || stringEnum(nn)
	case whole:
		if nn.Is("number") && !a.literal {
			c.probs = append(c.probs, Problem{Offset: at, Len: len(fn), Call: true, Warning: true,
				Message: fmt.Sprintf("%s takes a whole number, but %s is a number, which fails when the template renders unless it is held as an integer: make the field an integer", fn, a.what)})
			return
		}
		fits = nn.Is("integer")
	case list:
		fits = nn.Is("array")
	case sized:
		fits = onlyOf(nn, "string", "array", "object")
	case indexable:
		fits = onlyOf(nn, "array", "object")
	case sliceable:
		fits = onlyOf(nn, "string", "array")
	}
	if fits {
		return
	}
	msg := fmt.Sprintf("%s takes %s, but %s is %s: the template fails when it renders", fn, paramWords[p], a.what, typeWords(nn))
	if p == list {
		msg = fmt.Sprintf("%s takes %s, but %s is %s: it renders nothing", fn, paramWords[p], a.what, typeWords(nn))
	}
	c.probs = append(c.probs, Problem{Offset: at, Len: len(fn), Call: true, Message: msg})
}

var paramWords = map[param]string{
	text: "a text", whole: "a whole number", list: "a list", sized: "a text, a list or an object",
	indexable: "a list or an object", sliceable: "a text or a list",
}

// onlyOf reports whether every type of s is one of types.
func onlyOf(s *schema.Shape, types ...string) bool {
	for _, t := range s.Types {
		found := false
		for _, u := range types {
			found = found || t == u
		}
		if !found {
			return false
		}
	}
	return true
}

// stringEnum reports whether s is an enum of texts with no type named.
func stringEnum(s *schema.Shape) bool {
	_, ok := s.Strings()
	return ok && len(s.Types) == 0
}

// typeWords names a shape's types in words: "an integer", "a text or a
// boolean".
func typeWords(s *schema.Shape) string {
	words := make([]string, len(s.Types))
	for i, t := range s.Types {
		switch t {
		case "string":
			words[i] = "a text"
		case "integer":
			words[i] = "an integer"
		case "number":
			words[i] = "a number"
		case "boolean":
			words[i] = "a boolean"
		case "array":
			words[i] = "a list"
		case "object":
			words[i] = "an object"
		default:
			words[i] = t
		}
	}
	return strings.Join(words, " or ")
}

// printf checks printf's format against its values: as many verbs as
// values, and each verb given a value it prints (%d an integer, %f a
// number, %s a text, %t a boolean; %v anything). A format with explicit
// argument indexes or * widths is not judged.
func (c *checker) printf(at int, format string, args []value) {
	verbs, ok := printfVerbs(format)
	if !ok {
		return
	}
	switch {
	case len(verbs) > len(args):
		c.probs = append(c.probs, Problem{Offset: at, Len: len("printf"), Call: true,
			Message: fmt.Sprintf("printf's format has %s, but it is given %s: it renders %%!%c(MISSING)", count(len(verbs), "verb"), count(len(args), "value"), verbs[len(args)])})
		return
	case len(verbs) < len(args):
		c.probs = append(c.probs, Problem{Offset: at, Len: len("printf"), Call: true,
			Message: fmt.Sprintf("printf's format has %s, but it is given %s: it renders %%!(EXTRA ...)", count(len(verbs), "verb"), count(len(args), "value"))})
		return
	}
	for i, v := range verbs {
		a := args[i]
		s := a.shape
		if !s.Known() || v == 'v' {
			continue
		}
		nn := s.WithoutNull()
		if s.MayBeNull() {
			c.probs = append(c.probs, Problem{Offset: at, Len: len("printf"), Call: true, MayBeNull: true, Path: a.path,
				Message: fmt.Sprintf("printf's %%%c is given %s, which may be null: it renders %%!%c(<nil>); read it inside a with or an if on it", v, a.what, v)})
			continue
		}
		var want string
		warn := false
		switch v {
		case 'd', 'b', 'o', 'O', 'c', 'U':
			want = "an integer"
			if nn.Is("number") {
				warn = true
			} else if !nn.Is("integer") {
				want += "!"
			}
		case 'e', 'E', 'f', 'F', 'g', 'G':
			want = "a number"
			if nn.Is("integer") {
				want += "!"
			} else if !nn.Is("number") {
				want += "!"
			}
		case 's', 'q':
			want = "a text"
			if !nn.Is("string") && !stringEnum(nn) && !nn.Is("array") && !nn.Is("object") {
				want += "!"
			}
		case 't':
			want = "a boolean"
			if !nn.Is("boolean") {
				want += "!"
			}
		case 'x', 'X':
			want = "a text or an integer"
			if !onlyOf(nn, "string", "integer", "array") {
				want += "!"
			}
		default:
			continue
		}
		switch {
		case warn:
			c.probs = append(c.probs, Problem{Offset: at, Len: len("printf"), Call: true, Warning: true,
				Message: fmt.Sprintf("printf's %%%c prints %s, but %s is a number, which may have a fraction: it renders %%!%c(float64=...) then; use %%v", v, want, a.what, v)})
		case strings.HasSuffix(want, "!"):
			c.probs = append(c.probs, Problem{Offset: at, Len: len("printf"), Call: true,
				Message: fmt.Sprintf("printf's %%%c prints %s, but %s is %s: it renders %%!%c(...); use %%v", v, strings.TrimSuffix(want, "!"), a.what, typeWords(nn), v)})
		}
	}
}

// printfVerbs lists the verbs of a format, in order; ok is false for a
// format whose values are not taken one verb at a time ([n] indexes, *
// widths).
func printfVerbs(format string) (verbs []rune, ok bool) {
	rs := []rune(format)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '%' {
			continue
		}
		i++
		for i < len(rs) && strings.ContainsRune("+-# 0123456789.", rs[i]) {
			i++
		}
		if i >= len(rs) {
			return verbs, true // a lone % at the end: %!(NOVERB)
		}
		switch rs[i] {
		case '%':
			continue
		case '*', '[':
			return nil, false
		}
		verbs = append(verbs, rs[i])
	}
	return verbs, true
}

// count says n things: "1 verb", "2 verbs".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
