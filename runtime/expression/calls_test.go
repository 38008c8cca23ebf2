package expression

import (
	"reflect"
	"slices"
	"testing"

	"github.com/expr-lang/expr/builtin"
	"github.com/expr-lang/expr/conf"
)

// Every function an expression may call at run time is known to the
// checker with its signature (calls), and to the names it suggests
// (registered): a function added to one table and not the others fails
// here, not in a flow that validates without its types. The checker's
// parameters and result agree with the Go function's declared type.
func TestEveryRuntimeFunctionIsChecked(t *testing.T) {
	c := conf.CreateNew()
	for _, opt := range functions {
		opt(c)
	}
	var runtime []string
	for name, fn := range c.Functions {
		if slices.ContainsFunc(builtin.Builtins, func(b *builtin.Function) bool { return b.Name == name }) {
			// expr's own built-in, replaced (emptyConcat, uniqByValue):
			// the checker types it as a built-in
			continue
		}
		runtime = append(runtime, name)
		sig, ok := calls[name]
		if !ok {
			t.Errorf("function %s runs but the checker does not know it: give it a signature in calls", name)
			continue
		}
		if len(fn.Types) != 1 {
			t.Errorf("function %s: %d declared types, want one signature", name, len(fn.Types))
			continue
		}
		ft := fn.Types[0]
		if ft.NumIn() != len(sig.params) {
			t.Errorf("function %s takes %d arguments, the checker says %d", name, ft.NumIn(), len(sig.params))
			continue
		}
		for i, p := range sig.params {
			if want := typeName(ft.In(i)); p != want {
				t.Errorf("function %s argument %d: checker %q, function %q", name, i+1, p, want)
			}
		}
		if want := typeName(ft.Out(0)); !sig.result.Is(want) {
			t.Errorf("function %s gives %s, the checker says %v", name, want, sig.result.Types)
		}
		if ft.Out(0).Kind() == reflect.Slice {
			if want := typeName(ft.Out(0).Elem()); sig.result.Items == nil || !sig.result.Items.Is(want) {
				t.Errorf("function %s gives a list of %s, the checker says otherwise", name, want)
			}
		}
	}
	slices.Sort(runtime)
	for name := range calls {
		if !slices.Contains(runtime, name) {
			t.Errorf("the checker knows %s, which no function runs", name)
		}
	}
	if names := slices.Sorted(slices.Values(registered)); !slices.Equal(names, runtime) {
		t.Errorf("registered names %v, functions %v", names, runtime)
	}
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	case reflect.Interface:
		return ""
	}
	return t.String()
}
