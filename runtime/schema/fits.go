package schema

import (
	"fmt"
	"slices"
	"strings"
)

// Fits lists the ways a value of shape src may fail shape dst: a type dst
// does not allow, null where dst takes none, a property dst requires that
// src may lack, a property a closed dst does not declare, a string dst's
// enum does not list; each names the place (path, from the values' root)
// and both sides. Only what both shapes state is compared: nothing is
// reported where either is unknown.
func Fits(src, dst *Shape, path string) []string {
	var out []string
	fits(src, dst, path, 0, &out)
	return out
}

func fits(src, dst *Shape, path string, depth int, out *[]string) {
	if src == nil || dst == nil || depth > 16 || len(*out) > 8 {
		return
	}
	at := path
	if at == "" {
		at = "the value"
	}
	if len(src.Types) > 0 && len(dst.Types) > 0 {
		var bad []string
		for _, t := range src.Types {
			if !dst.Takes(t) {
				bad = append(bad, t)
			}
		}
		if len(bad) == 1 && bad[0] == "number" && dst.Allows("integer") {
			*out = append(*out, fmt.Sprintf("%s may be a number with a fraction, where the field takes %s only", at, dst.Describe()))
			return
		}
		if len(bad) > 0 {
			what := "may be " + strings.Join(bad, " or ")
			if len(bad) == len(src.Types) {
				what = "is " + src.Describe()
			}
			*out = append(*out, fmt.Sprintf("%s %s, where the field takes %s", at, what, dst.Describe()))
			return
		}
	}
	if want, ok := dst.Strings(); ok {
		if have, ok := src.Strings(); ok {
			var extra []string
			for _, v := range have {
				if !slices.Contains(want, v) {
					extra = append(extra, fmt.Sprintf("%q", v))
				}
			}
			if len(extra) > 0 {
				*out = append(*out, fmt.Sprintf("%s may be %s, which the field's enum (%s) does not list", at, strings.Join(extra, ", "), quote(want)))
			}
		}
	}
	isObject := func(s *Shape) bool {
		return len(s.Types) == 0 && len(s.Props) > 0 || slices.Contains(s.Types, "object")
	}
	if isObject(src) && isObject(dst) && len(src.Props) > 0 {
		for _, name := range dst.Required {
			if _, has := src.Props[name]; has && !slices.Contains(src.Required, name) {
				*out = append(*out, fmt.Sprintf("%s may lack %q, which the field requires", at, name))
			} else if !has && src.Closed {
				*out = append(*out, fmt.Sprintf("%s never has %q, which the field requires", at, name))
			}
		}
		for _, name := range src.Order {
			d, declared := dst.Props[name]
			if !declared {
				if dst.Closed {
					*out = append(*out, fmt.Sprintf("%s has %q, which the field does not declare (additionalProperties: false)", at, name))
				}
				continue
			}
			fits(src.Props[name], d, join(path, name), depth+1, out)
		}
	}
	if src.Items != nil && dst.Items != nil {
		fits(src.Items, dst.Items, path+"[]", depth+1, out)
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func quote(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = fmt.Sprintf("%q", v)
	}
	return strings.Join(q, ", ")
}
