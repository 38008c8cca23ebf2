package sandbox_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
)

// program is a solution with its tests, the outcome of each, and its
// metrics as computed by hand.
type program struct {
	name, lang, code string
	tests            []map[string]any
	passed           []bool
	status           string
	metrics          string // JSON, compared field by field
}

var programs = []program{
	{
		name: "two sum", lang: "python",
		code: `def two_sum(nums, target):
    # one pass with a map of seen values
    seen = {}
    for i, n in enumerate(nums):
        if target - n in seen:
            return [seen[target - n], i]
        seen[n] = i
    return []
`,
		tests: []map[string]any{
			{"name": "basic", "call": "two_sum([2, 7, 11, 15], 9)", "expected": []any{0.0, 1.0}},
			{"name": "none", "call": "two_sum([1, 2], 7)", "expected": []any{}},
			{"name": "wrong on purpose", "call": "two_sum([3, 3], 6)", "expected": []any{1.0, 0.0}},
		},
		passed: []bool{true, true, false}, status: sandbox.StatusFailed,
		// complexity 1 + for + if = 3; nesting def > for > if = 3
		metrics: `{"lines": 8, "comments": 1, "classes": 0, "complexity": 3, "max_nesting": 3,
			"functions": [{"name": "two_sum", "line": 1, "complexity": 3, "nesting": 2}]}`,
	},
	{
		name: "fizzbuzz on stdin", lang: "python",
		code: `import sys


def fizz(n):
    if n % 15 == 0:
        return "FizzBuzz"
    elif n % 3 == 0:
        return "Fizz"
    elif n % 5 == 0:
        return "Buzz"
    return str(n)


class Runner:
    def run(self, k):
        return [fizz(i) for i in range(1, k + 1) if i > 0 and i < 100]


print(" ".join(Runner().run(int(sys.stdin.read()))))
`,
		tests: []map[string]any{
			{"name": "five", "stdin": "5", "stdout": "1 2 Fizz 4 Buzz"},
			{"name": "fifteen", "stdin": "15\n", "stdout": "1 2 Fizz 4 Buzz Fizz 7 8 Fizz Buzz 11 Fizz 13 14 FizzBuzz\n"},
			{"name": "call", "call": "fizz(9)", "expected": "Fizz"},
		},
		// the module reads stdin when imported: the call test gets no input
		passed: []bool{true, true, false}, status: sandbox.StatusFailed,
		// fizz: 1 + if + elif + elif = 4; run: 1 + comprehension (1) + its
		// if (1) + and (1) = 4; nesting: class > def = 2, def > if > elif > elif = 4
		metrics: `{"lines": 13, "comments": 0, "classes": 1, "complexity": 4, "max_nesting": 4,
			"functions": [{"name": "fizz", "line": 4, "complexity": 4, "nesting": 3}, {"name": "run", "line": 15, "complexity": 4, "nesting": 0}]}`,
	},
	{
		name: "syntax error", lang: "python",
		code:    "def f(:\n    return 1\n",
		tests:   []map[string]any{{"name": "t", "call": "f()", "expected": 1.0}},
		status:  sandbox.StatusSyntaxError,
		metrics: `{"lines": 2, "comments": 0, "syntax_error": {"line": 1, "column": 7, "message": "invalid syntax"}}`,
	},
	{
		name: "two sum", lang: "javascript",
		code: `// one pass with a map of seen values
function twoSum(nums, target) {
  const seen = new Map();
  for (let i = 0; i < nums.length; i++) {
    if (seen.has(target - nums[i])) return [seen.get(target - nums[i]), i];
    seen.set(nums[i], i);
  }
  return [];
}
const sum = (xs) => xs.reduce((a, b) => a + b, 0);
async function later(x) { return x && x > 0 ? x : 0; }
`,
		tests: []map[string]any{
			{"name": "basic", "call": "twoSum([2, 7, 11, 15], 9)", "expected": []any{0.0, 1.0}},
			{"name": "sum", "call": "sum([1, 2, 3])", "expected": 6.0},
			{"name": "promise", "call": "later(5)", "expected": 5.0},
			{"name": "wrong on purpose", "call": "sum([])", "expected": 1.0},
		},
		passed: []bool{true, true, true, false}, status: sandbox.StatusFailed,
		// twoSum: 1 + for + if = 3; later: 1 + && + ?: = 3; nesting:
		// function > for > if = 3
		metrics: `{"lines": 11, "comments": 1, "classes": 0, "complexity": 3, "max_nesting": 3,
			"functions": [{"name": "twoSum", "line": 2, "complexity": 3, "nesting": 2},
				{"name": "sum", "line": 10, "complexity": 1, "nesting": 1},
				{"name": "(anonymous)", "line": 10, "complexity": 1, "nesting": 0},
				{"name": "later", "line": 11, "complexity": 3, "nesting": 0}]}`,
	},
	{
		name: "echo on stdin", lang: "javascript",
		code:   "const data = require('fs').readFileSync(0, 'utf8');\nprocess.stdout.write(data.toUpperCase());\n",
		tests:  []map[string]any{{"name": "upper", "stdin": "abc", "stdout": "ABC"}, {"name": "wrong", "stdin": "x", "stdout": "x"}},
		passed: []bool{true, false}, status: sandbox.StatusFailed,
		metrics: `{"lines": 2, "comments": 0, "classes": 0, "complexity": 1, "max_nesting": 0, "functions": []}`,
	},
	{
		name: "syntax error", lang: "javascript",
		code:    "function f( {\n  return 1;\n}\n",
		status:  sandbox.StatusSyntaxError,
		metrics: `{"lines": 3, "comments": 0, "syntax_error": {"line": 2, "column": 3, "message": "Unexpected keyword 'return'"}}`,
	},
}

// TestCorrectPrograms runs honest programs on each backend (and gVisor's
// where it runs): each test's verdict, the counts and the metrics.
func TestCorrectPrograms(t *testing.T) {
	langs := sandbox.Builtin()
	pools := withRunsc(t, sandboxtest.Backends(t, 2))
	for _, name := range []string{"local", "docker", "docker-runsc"} {
		pool, ok := pools[name]
		t.Run(name, func(t *testing.T) {
			if !ok {
				t.Skip(runscMissing)
			}
			for _, p := range programs {
				t.Run(p.lang+"/"+p.name, func(t *testing.T) {
					t.Parallel()
					r, err := sandbox.Execute(ctx, pool, langs[p.lang], sandbox.Submission{Code: p.code, Tests: p.tests})
					if err != nil {
						t.Fatal(err)
					}
					if r.Status != p.status {
						t.Errorf("status %s, want %s (%+v)", r.Status, p.status, r)
					}
					if p.status != sandbox.StatusSyntaxError {
						if len(r.Tests) != len(p.passed) {
							t.Fatalf("%d test results, want %d: %+v", len(r.Tests), len(p.passed), r.Tests)
						}
						for i, want := range p.passed {
							if got := r.Tests[i]["passed"]; got != want {
								t.Errorf("test %s passed %v, want %v: %+v", p.tests[i]["name"], got, want, r.Tests[i])
							}
							if r.Tests[i]["name"] != p.tests[i]["name"] {
								t.Errorf("test %d named %v", i, r.Tests[i]["name"])
							}
						}
						if r.Passed+r.Failed != r.Total || r.Total != len(p.passed) {
							t.Errorf("counts %d+%d of %d", r.Passed, r.Failed, r.Total)
						}
					}
					var want map[string]any
					if err := json.Unmarshal([]byte(p.metrics), &want); err != nil {
						t.Fatal(err)
					}
					got := map[string]any{}
					b, _ := json.Marshal(r.Metrics)
					_ = json.Unmarshal(b, &got)
					if !reflect.DeepEqual(got, want) {
						gb, _ := json.Marshal(got)
						t.Errorf("metrics\n got %s\nwant %s", gb, p.metrics)
					}
				})
			}
		})
	}
}
