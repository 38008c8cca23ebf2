package tmpl

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"text/template"

	"gopkg.in/yaml.v3"
)

// resumeValue is a structured resume as a thread's state holds it.
func resumeValue(projects int) map[string]any {
	ps := make([]any, projects)
	for i := range ps {
		ps[i] = map[string]any{
			"name":         fmt.Sprintf("project %d: a streaming log indexer", i),
			"summary":      "Indexes 2 TB of logs a day with Go and Kafka, searchable within seconds; owned its \"on-call\" rotation.",
			"technologies": []any{"Go", "Kafka", "PostgreSQL"},
			"year":         float64(2020 + i%5),
			"team":         i % 7,
			"lead":         i%2 == 0,
			"notes":        nil,
		}
	}
	return map[string]any{
		"name": "Ada", "target_role": "Backend Engineer", "projects": ps,
		"skills": []any{"Go", "PostgreSQL", "distributed systems"}, "years": 7.5,
		"experiences": []any{map[string]any{"company": "Northwind", "role": "Software Engineer", "summary": "Owned the ingestion pipeline.\nAnd its on-call rotation."}},
	}
}

// plainFuncs are the json and yaml functions as they were before they
// remembered: each call marshals.
var plainFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.MarshalIndent(v, "", "  ")
		return string(b), err
	},
	"yaml": func(v any) (string, error) {
		b, err := yaml.Marshal(v)
		return strings.TrimRight(string(b), "\n"), err
	},
}

// randomValue is a value of the kinds state holds.
func randomValue(r *rand.Rand, depth int) any {
	n := r.IntN(10)
	if depth > 3 {
		n = r.IntN(6)
	}
	switch n {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return []string{"", "a", "yes", "null", "1.5", "line\nbreak", "ünï", `"q"`}[r.IntN(8)]
	case 3:
		return float64(r.IntN(5))
	case 4:
		return r.Float64() * 100
	case 5:
		return r.IntN(5)
	case 6, 7:
		l := make([]any, r.IntN(4))
		for i := range l {
			l[i] = randomValue(r, depth+1)
		}
		return l
	default:
		m := map[string]any{}
		for range r.IntN(4) {
			m[[]string{"a", "b", "c", "name", "0", "Name"}[r.IntN(6)]] = randomValue(r, depth+1)
		}
		return m
	}
}

// TestRenderedIsByteIdentical: json and yaml give, for any value, the
// bytes marshalling it gives, the first time and every time after; a
// value changed in place renders its new contents.
func TestRenderedIsByteIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	values := []any{resumeValue(3), resumeValue(0), []any{}, map[string]any{}, []any{1, 1.0, "1"}, map[string]any{"a": map[string]any{}, "b": []any{}}}
	for range 2000 {
		values = append(values, randomValue(r, 0))
	}
	for _, form := range []string{"json", "yaml"} {
		for i, v := range values {
			want, werr := plainFuncs[form].(func(any) (string, error))(v)
			for pass := range 2 {
				got, err := Funcs[form].(func(any) (string, error))(v)
				if got != want || (err == nil) != (werr == nil) {
					t.Fatalf("%s of value %d (pass %d): got %q, %v; want %q, %v", form, i, pass, got, err, want, werr)
				}
			}
		}
	}
	res := resumeValue(2)
	before, _ := renderYAML(res)
	res["projects"].([]any)[1].(map[string]any)["team"] = 99
	after, _ := renderYAML(res)
	want, _ := plainFuncs["yaml"].(func(any) (string, error))(res)
	if after != want || after == before {
		t.Fatalf("a value changed in place renders stale:\n%s", after)
	}
}

// TestARenderedValueIsMarshalledOnce: a prompt that shows the same value
// turn after turn marshals it once, whether the value is the same one or
// a copy read again from the store.
func TestARenderedValueIsMarshalledOnce(t *testing.T) {
	tm, err := Parse("p", "{{yaml .state.resume}}\n{{json .state.resume}}")
	if err != nil {
		t.Fatal(err)
	}
	res := resumeValue(4)
	data := map[string]any{"state": map[string]any{"resume": res}}
	first, err := Execute(tm, data)
	if err != nil {
		t.Fatal(err)
	}
	n := marshals.Load()
	copied := deepCopy(res)
	for turn := range 5 {
		v := any(res)
		if turn%2 == 1 {
			v = copied
		}
		got, err := Execute(tm, map[string]any{"state": map[string]any{"resume": v}})
		if err != nil || got != first {
			t.Fatalf("turn %d: %v\n%s", turn, err, got)
		}
	}
	if m := marshals.Load() - n; m != 0 {
		t.Fatalf("the value was marshalled %d more times", m)
	}
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, it := range x {
			out[i] = deepCopy(it)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, it := range x {
			out[k] = deepCopy(it)
		}
		return out
	}
	return v
}

// BenchmarkRenderResume renders a prompt that shows a resume as YAML and
// as JSON each turn, with the functions that remember (cached) and with
// plain marshalling (marshal).
func BenchmarkRenderResume(b *testing.B) {
	const text = "You interview for {{.state.resume.target_role}}.\n{{fence (yaml .state.resume)}}\n{{json .state.resume.projects}}\n"
	data := map[string]any{"state": map[string]any{"resume": resumeValue(12)}}
	for _, c := range []struct {
		name  string
		funcs template.FuncMap
	}{{"cached", Funcs}, {"marshal", plainFuncs}} {
		tm := template.Must(template.New("p").Funcs(Funcs).Funcs(c.funcs).Option("missingkey=zero").Parse(text))
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Execute(tm, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
