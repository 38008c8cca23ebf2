// Package tmpl compiles the text templates of files a flow's nodes read
// (a prompt's messages, say): Go's text/template with a small function
// library, checked before any run against the shapes of the data it will
// see, so that a misspelt field is a load error with a position, not an
// empty string at run time.
package tmpl

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"strings"
	"text/template"

	"github.com/trellisflow/trellis/runtime/expression"
)

// Execute renders t over data.
func Execute(t *template.Template, data any) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Funcs are the functions templates may call, besides text/template's own.
var Funcs = template.FuncMap{
	// json renders a value as indented JSON.
	"json": renderJSON,
	// yaml renders a value as YAML, which models read easily.
	"yaml": renderYAML,
	// fence puts text in a Markdown code fence nothing in it can close
	// (expression.Fence): what a prompt shows as data, never as
	// instructions, such as a candidate's code or a resume.
	"fence": expression.Fence,
	// default returns def when v is nil or empty.
	"default": func(def, v any) any {
		switch x := v.(type) {
		case nil:
			return def
		case string:
			if x == "" {
				return def
			}
		case []any:
			if len(x) == 0 {
				return def
			}
		}
		return v
	},
	"join": func(sep string, v any) string {
		items, _ := v.([]any)
		s := make([]string, len(items))
		for i, it := range items {
			s[i] = fmt.Sprint(it)
		}
		return strings.Join(s, sep)
	},
	// first returns the first n items of a list (all when it has fewer).
	"first": func(n int, v any) []any {
		items, _ := v.([]any)
		if len(items) > n {
			return items[:max(n, 0)]
		}
		return items
	},
	// last returns the last n items of a list (all when it has fewer).
	"last": func(n int, v any) []any {
		items, _ := v.([]any)
		if len(items) > n {
			return items[len(items)-max(n, 0):]
		}
		return items
	},
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	"trim":  strings.TrimSpace,
	// The comparisons compare numbers by value, whole or not: a number
	// field holds 5 or 5.5, and either compares with 0 or 0.0, where
	// text/template's own fail on an int beside a float64.
	"eq": eq,
	"ne": func(a, b any) (bool, error) {
		same, err := eq(a, b)
		return !same, err
	},
	"lt": func(a, b any) (bool, error) { return order(a, b, func(c int) bool { return c < 0 }) },
	"le": func(a, b any) (bool, error) { return order(a, b, func(c int) bool { return c <= 0 }) },
	"gt": func(a, b any) (bool, error) { return order(a, b, func(c int) bool { return c > 0 }) },
	"ge": func(a, b any) (bool, error) { return order(a, b, func(c int) bool { return c >= 0 }) },
}

// eq reports whether a equals any of bs, as text/template's eq does, but
// numbers compare by value whatever their Go type, and a missing value
// (nil) equals only nil.
func eq(a any, bs ...any) (bool, error) {
	if len(bs) == 0 {
		return false, errors.New("eq needs at least two values to compare")
	}
	for _, b := range bs {
		switch {
		case a == nil || b == nil:
			if a == nil && b == nil {
				return true, nil
			}
			continue
		}
		if c, ok := compareNumbers(a, b); ok {
			if c == 0 {
				return true, nil
			}
			continue
		}
		ka, kb := kindName(a), kindName(b)
		if ka != kb {
			return false, fmt.Errorf("cannot compare %s with %s", ka, kb)
		}
		switch x := a.(type) {
		case string, bool:
			if x == b {
				return true, nil
			}
		default:
			return false, fmt.Errorf("cannot compare %s: only numbers, texts and booleans compare", ka)
		}
	}
	return false, nil
}

// order compares a with b (numbers by value, texts by their bytes) and
// says what holds of the result.
func order(a, b any, holds func(int) bool) (bool, error) {
	if c, ok := compareNumbers(a, b); ok {
		return c != 2 && holds(c), nil
	}
	x, xok := a.(string)
	y, yok := b.(string)
	if xok && yok {
		return holds(strings.Compare(x, y)), nil
	}
	ka, kb := kindName(a), kindName(b)
	if ka != kb {
		return false, fmt.Errorf("cannot order %s and %s", ka, kb)
	}
	return false, fmt.Errorf("cannot order %s: only numbers and texts have an order", ka)
}

// compareNumbers compares two numbers exactly: -1, 0 or 1, or 2 when
// either is NaN; ok is false when either is not a number.
func compareNumbers(a, b any) (int, bool) {
	ai, af, aInt, ok := number(a)
	if !ok {
		return 0, false
	}
	bi, bf, bInt, ok := number(b)
	if !ok {
		return 0, false
	}
	switch {
	case aInt && bInt:
		return cmp.Compare(ai, bi), true
	case !aInt && !bInt:
		if math.IsNaN(af) || math.IsNaN(bf) {
			return 2, true
		}
		return cmp.Compare(af, bf), true
	case aInt:
		return intFloat(ai, bf), true
	default:
		c := intFloat(bi, af)
		if c == 2 {
			return 2, true
		}
		return -c, true
	}
}

// intFloat compares an integer with a float exactly (2 for NaN).
func intFloat(i int64, f float64) int {
	switch {
	case math.IsNaN(f):
		return 2
	case f < -(1 << 63):
		return 1
	case f >= 1<<63:
		return -1
	}
	t := math.Trunc(f)
	if c := cmp.Compare(i, int64(t)); c != 0 {
		return c
	}
	return cmp.Compare(0, f-t)
}

func number(v any) (i int64, f float64, isInt, ok bool) {
	switch x := v.(type) {
	case int:
		return int64(x), 0, true, true
	case int64:
		return x, 0, true, true
	case int32:
		return int64(x), 0, true, true
	case float64:
		return 0, x, false, true
	case float32:
		return 0, float64(x), false, true
	}
	return 0, 0, false, false
}

// kindName names a value's kind in a flow's words.
func kindName(v any) string {
	switch v.(type) {
	case nil:
		return "nothing (an unset value)"
	case string:
		return "a text"
	case bool:
		return "a boolean"
	case int, int64, int32, float64, float32:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", v)
}

// Parse parses a template. name is used in error messages.
func Parse(name, text string) (*template.Template, error) {
	return template.New(name).Funcs(Funcs).Option("missingkey=zero").Parse(text)
}
