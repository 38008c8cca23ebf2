package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/kind"
)

var update = flag.Bool("update", false, "rewrite golden files")

func trellis(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Main(args, &cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Registry: all.Registry(), Offline: all.Offline(),
		WithModel: func(p *llm.Provider) kind.Registry { return all.WithProvider(func() *llm.Provider { return p }) }})
	return out.String(), errb.String(), code
}

// examples are the validator's fixtures: a failing and a passing flow per
// diagnostic code.
const examples = "../../runtime/diag/examples"

// relative names the examples' files relative to their folder (prompt
// files, outside the working directory, are named by absolute paths).
func relative(out string) string {
	abs, _ := filepath.Abs(examples)
	return strings.ReplaceAll(strings.ReplaceAll(out, abs+"/", ""), examples+"/", "")
}

// TestDiagnosticFixtures checks every code's failing fixture against its
// golden output, and that its passing fixture is clean.
func TestDiagnosticFixtures(t *testing.T) {
	bad, _ := filepath.Glob(examples + "/*.bad.yaml")
	covered := map[string]bool{}
	for _, f := range bad {
		code := strings.TrimSuffix(filepath.Base(f), ".bad.yaml")
		covered[code] = true
		t.Run(code, func(t *testing.T) {
			out, _, exit := trellis(t, "validate", f)
			out = relative(out) // the golden output names files as explain shows them
			// exit 1 on any error; a code that only warns exits 0
			if want := map[bool]int{true: 1, false: 0}[strings.Contains(out, ": error[")]; exit != want {
				t.Errorf("exit %d, want %d", exit, want)
			}
			if !strings.Contains(out, "error["+code+"]") && !strings.Contains(out, "warning["+code+"]") {
				t.Errorf("output lacks %s:\n%s", code, out)
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".diags"
			if *update {
				os.WriteFile(golden, []byte(out), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", golden, out, want)
			}
			ok := strings.Replace(f, ".bad.", ".ok.", 1)
			out, stderr, exit := trellis(t, "validate", ok)
			if exit != 0 || out != "" {
				t.Errorf("%s: exit %d\n%s%s", ok, exit, out, stderr)
			}
		})
	}
	for _, c := range diag.Codes {
		if code := string(c.Code); !covered[code] {
			t.Errorf("code %s has no fixture", code)
		}
	}
}

func TestValidateDirectoryReportsEverything(t *testing.T) {
	out, stderr, exit := trellis(t, "validate", examples)
	out = relative(out)
	if exit != 1 {
		t.Fatalf("exit %d", exit)
	}
	lines := regexp.MustCompile(`(?m)^(?:prompts/)?(\w+)\.bad\.(?:yaml|prompt):\d+:\d+: (?:error|warning)\[(\w+)\]`).FindAllStringSubmatch(out, -1)
	files := map[string]bool{}
	for _, l := range lines {
		files[l[1]] = true
	}
	bad, _ := filepath.Glob(examples + "/*.bad.yaml")
	if len(files) != len(bad) {
		t.Fatalf("diagnostics from %d of %d broken files", len(files), len(bad))
	}
	if strings.Contains(out, ".ok.yaml") {
		t.Fatalf("a clean fixture was reported:\n%s", out)
	}
	if !regexp.MustCompile(`^\d+ flows checked: \d+ errors, \d+ warnings\n$`).MatchString(stderr) {
		t.Fatalf("no summary: %s", stderr)
	}
}

func TestValidateFormats(t *testing.T) {
	f := examples + "/G001.bad.yaml"
	out, _, exit := trellis(t, "validate", "--format", "json", f)
	var ds []map[string]any
	if err := unmarshalDiags(out, &ds); err != nil || exit != 1 || len(ds) != 1 {
		t.Fatalf("json: exit %d err %v\n%s", exit, err, out)
	}
	if ds[0]["code"] != "G001" || ds[0]["suggestion"] != "second" || ds[0]["line"].(float64) != 19 || ds[0]["path"] != "edges[1].to" {
		t.Fatalf("json diagnostic %v", ds[0])
	}
	out, _, _ = trellis(t, "validate", "--format", "github", f)
	if !strings.HasPrefix(out, "::error file="+examples+"/G001.bad.yaml,line=19,col=") {
		t.Fatalf("github: %s", out)
	}
	out, _, exit = trellis(t, "validate", "--format", "json", examples+"/G001.ok.yaml")
	var clean struct {
		Valid       bool              `json:"valid"`
		Diagnostics []json.RawMessage `json:"diagnostics"`
		Flows       []struct {
			File   string            `json:"file"`
			Inputs []json.RawMessage `json:"inputs"`
		} `json:"flows"`
	}
	if err := json.Unmarshal([]byte(out), &clean); exit != 0 || err != nil || !clean.Valid || clean.Diagnostics == nil || len(clean.Diagnostics) != 0 ||
		len(clean.Flows) != 1 || clean.Flows[0].File != examples+"/G001.ok.yaml" || clean.Flows[0].Inputs == nil {
		t.Fatalf("clean json: %d %v %s", exit, err, out)
	}
}

// unmarshalDiags decodes the diagnostics of what validate --format json
// printed.
func unmarshalDiags(out string, ds any) error {
	var v struct {
		Diagnostics json.RawMessage `json:"diagnostics"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return err
	}
	if v.Diagnostics == nil {
		return fmt.Errorf("no diagnostics in %s", out)
	}
	return json.Unmarshal(v.Diagnostics, ds)
}

// Subflows, maps and nodes that ask are drawn distinctly: collapsed,
// a subflow is a subroutine (a component in DOT) and a map a trapezoid (a
// stack); expanded, each is a box holding the child flow's graph or the
// node run per item, which the arcs enter and leave; JSON holds both.
func TestGraphComposite(t *testing.T) {
	const interview, approval = "../../flows/interview.yaml", "../../flows/examples/approval.yaml"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"graph", interview}, []string{`n_screen_resume[["screen_resume<br/><small>subflow resume_review</small>"]]`, "n_initialize -->|\"state.review_resume\"| n_screen_resume"}},
		{[]string{"graph", "../../flows/resume_review.yaml"}, []string{`n_sections[/"sections<br/><small>map over take(state.resume?.experience ?? [], state.max_sections), 4 at once: llm</small>"\]`}},
		{[]string{"graph", approval}, []string{`n_recruiter{{"recruiter<br/><small>interrupt, asks and waits</small>"}}`}},
		{[]string{"graph", "--expand", interview}, []string{
			`subgraph n_screen_resume ["screen_resume: subflow resume_review"]`,
			"    n_screen_resume__START([START])", "    n_screen_resume__START --> n_screen_resume__intake",
			`    subgraph n_screen_resume__sections ["sections: map over take(state.resume?.experience ?? [], state.max_sections), 4 at once: llm"]`,
			`      n_screen_resume__sections__each["each item<br/><small>llm</small>"]`,
			"n_screen_resume --> n_greeting"}},
		{[]string{"graph", "--format", "dot", interview}, []string{`"screen_resume" [label="screen_resume\n(subflow resume_review)", shape=component];`}},
		{[]string{"graph", "--format", "dot", approval}, []string{`"recruiter" [label="recruiter\n(interrupt, asks and waits)", shape=hexagon];`}},
		{[]string{"graph", "--format", "dot", "--expand", interview}, []string{
			`subgraph "cluster_screen_resume" {`, `"initialize" -> "screen_resume/START" [label="state.review_resume"];`,
			`"screen_resume/END" -> "greeting";`, `subgraph "cluster_screen_resume/sections" {`,
			`"screen_resume/aggregator" -> "screen_resume/sections/each" [label="state.review_sections"];`}},
		{[]string{"graph", "--format", "dot", "../../flows/resume_review.yaml"}, []string{`shape=box3d`}},
	} {
		out, stderr, exit := trellis(t, tc.args...)
		if exit != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, exit, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
	out, _, _ := trellis(t, "graph", "--format", "json", interview)
	var doc struct {
		Nodes []struct {
			Name    string `json:"name"`
			Subflow *struct {
				Name  string `json:"name"`
				Path  string `json:"path"`
				Nodes []struct {
					Name string `json:"name"`
					Map  *struct {
						Items string `json:"items"`
						Max   int    `json:"max_concurrency"`
						Node  struct {
							Kind string `json:"kind"`
						} `json:"node"`
					} `json:"map"`
				} `json:"nodes"`
			} `json:"subflow"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range doc.Nodes {
		if n.Name != "screen_resume" || n.Subflow == nil {
			continue
		}
		for _, c := range n.Subflow.Nodes {
			if c.Name == "sections" && c.Map != nil && c.Map.Max == 4 && c.Map.Node.Kind == "llm" && strings.HasSuffix(n.Subflow.Path, "resume_review.yaml") {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("json lacks the subflow and its map:\n%s", out)
	}
}

func TestGraph(t *testing.T) {
	f := examples + "/G009.ok.yaml"
	for _, format := range []string{"mermaid", "dot", "json"} {
		out, stderr, exit := trellis(t, "graph", f, "--format", format)
		if exit != 0 {
			t.Fatalf("%s: %s", format, stderr)
		}
		again, _, _ := trellis(t, "graph", f, "--format", format)
		if out != again {
			t.Fatalf("%s output is not deterministic", format)
		}
		if !strings.Contains(out, "state.count > 1") && !strings.Contains(out, "state.count #gt; 1") {
			t.Fatalf("%s: conditional edge not labelled:\n%s", format, out)
		}
	}
	out, _, _ := trellis(t, "graph", f)
	for _, want := range []string{"START --> n_first", `n_first -->|"state.count #gt; 1"| n_second`, `n_first -->|"else"| n_third`, "n_second ==> n_last", "n_last --> END"} {
		if !strings.Contains(out, want) {
			t.Errorf("mermaid lacks %q:\n%s", want, out)
		}
	}
}

func TestRun(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	out, stderr, exit := trellis(t, "run", examples+"/G008.ok.yaml", "--input", "count=1", "--trace", "--store", db, "--thread", "t1")
	if exit != 0 {
		t.Fatalf("exit %d: %s", exit, stderr)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err, out)
	}
	if st["count"] != 3.0 || st["summary"] != "done" || len(st["log"].([]any)) != 2 {
		t.Fatalf("state %v", st)
	}
	for _, ev := range []string{"run_start", "node_start", "node_end", "state_update", "run_end"} {
		if !strings.Contains(stderr, ev) {
			t.Errorf("trace lacks %s:\n%s", ev, stderr)
		}
	}
	_, stderr, exit = trellis(t, "run", examples+"/G008.ok.yaml", "--input", "cont=1", "--store", "memory")
	if exit != 2 || !strings.Contains(stderr, `did you mean "count"`) {
		t.Fatalf("bad input: exit %d %s", exit, stderr)
	}
	// the thread persisted: a second process continues it
	out, stderr, exit = trellis(t, "run", examples+"/G008.ok.yaml", "--input", "count=0", "--store", db, "--thread", "t1")
	if exit != 0 || !strings.Contains(out, `"count": 3`) {
		t.Fatalf("second run: %d %s %s", exit, out, stderr)
	}
	out, _, exit = trellis(t, "history", "t1", "--store", db)
	if exit != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) < 6 || !strings.Contains(out, "create") {
		t.Fatalf("history:\n%s", out)
	}
	out, _, exit = trellis(t, "history", "t1", "--store", db, "--node", "second", "--limit", "0")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); exit != 0 || len(lines) < 2 || strings.Contains(out, "create") {
		t.Fatalf("history of node second:\n%s", out)
	} else {
		for _, l := range lines {
			if !strings.Contains(l, "nodes [second]") {
				t.Fatalf("history of node second lists %q", l)
			}
		}
	}
	out, _, _ = trellis(t, "history", "t1", "--store", db, "--source", "create")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.Contains(out, "create") {
		t.Fatalf("history of source create:\n%s", out)
	}
	// a correction between runs, written as a node
	out, stderr, exit = trellis(t, "update", examples+"/G008.ok.yaml", "t1", "--as", "second", "--set", "summary=fixed by hand", "--store", db)
	if exit != 0 || !strings.Contains(out, `"summary": "fixed by hand"`) || !strings.Contains(stderr, "written as second") {
		t.Fatalf("update: %d\n%s%s", exit, out, stderr)
	}
	out, _, _ = trellis(t, "history", "t1", "--store", db, "--source", "update")
	if !strings.Contains(out, "nodes [second] wrote [summary]") {
		t.Fatalf("history of the update:\n%s", out)
	}
	_, stderr, exit = trellis(t, "update", examples+"/G008.ok.yaml", "t1", "--as", "first", "--set", "summary=x", "--store", db)
	if exit != 2 || !strings.Contains(stderr, `node "first" does not write it`) {
		t.Fatalf("update of a field the node does not write: %d %s", exit, stderr)
	}
	out, _, _ = trellis(t, "state", "t1", "--store", db, "--at", "1")
	if !strings.Contains(out, `"count": 0`) {
		t.Fatalf("state at 1:\n%s", out)
	}
	if _, stderr, exit := trellis(t, "fork", "t1", "--at", "2", "--to", "t2", "--store", db); exit != 0 {
		t.Fatal(stderr)
	}
	out, _, _ = trellis(t, "threads", "--store", db)
	if !strings.Contains(out, "t1") || !strings.Contains(out, "t2") {
		t.Fatalf("threads:\n%s", out)
	}
	out, stderr, exit = trellis(t, "prune", "t1", "--keep", "2", "--store", db)
	if exit != 0 || !strings.Contains(out, "folded") {
		t.Fatalf("prune: %d %s %s", exit, out, stderr)
	}
	out, _, _ = trellis(t, "state", "t1", "--store", db)
	if !strings.Contains(out, `"count": 3`) {
		t.Fatalf("state after prune:\n%s", out)
	}
	if out, stderr, exit := trellis(t, "delete", "t2", "--store", db); exit != 0 || out != "deleted t2\n" {
		t.Fatalf("delete: %d %s %s", exit, out, stderr)
	}
	out, _, _ = trellis(t, "threads", "--store", db)
	if !strings.Contains(out, "t1") || strings.Contains(out, "t2") {
		t.Fatalf("threads after delete:\n%s", out)
	}
	if _, stderr, exit := trellis(t, "delete", "t2", "--store", db); exit != 3 || !strings.Contains(stderr, `no thread "t2"`) {
		t.Fatalf("deleting a missing thread: %d %s", exit, stderr)
	}
	if _, stderr, exit := trellis(t, "state", "t1", "--at", "999", "--store", db); exit != 3 || !strings.Contains(stderr, `thread "t1" has no checkpoint 999`) {
		t.Fatalf("state at a missing checkpoint: %d %s", exit, stderr)
	}
}

func TestHelp(t *testing.T) {
	out, _, exit := trellis(t, "--help")
	if exit != 0 || !strings.Contains(out, "validate") {
		t.Fatalf("help: %d %s", exit, out)
	}
	for _, cmd := range []string{"validate", "graph", "run", "schema", "threads", "history", "state", "fork", "update", "delete", "prune", "migrate"} {
		_, stderr, exit := trellis(t, cmd, "--help")
		if exit != 0 || !strings.Contains(stderr, "Usage: trellis "+cmd) {
			t.Errorf("%s --help: %d %s", cmd, exit, stderr)
		}
	}
	if _, _, exit := trellis(t, "nonsense"); exit != 2 {
		t.Errorf("unknown command exit %d", exit)
	}
}

func TestCodesAreDocumented(t *testing.T) {
	seen := map[diag.Code]bool{}
	for _, c := range diag.Codes {
		if !regexp.MustCompile(`^[A-Z]\d{3}$`).MatchString(string(c.Code)) || c.Doc == "" || seen[c.Code] {
			t.Errorf("code %q: malformed, undocumented or listed twice", c.Code)
		}
		seen[c.Code] = true
		if c.Code.Doc() != c.Doc {
			t.Errorf("code %s: Doc() disagrees with the table", c.Code)
		}
	}
	if len(seen) < 30 {
		t.Fatalf("only %d codes", len(seen))
	}
}

// SARIF output carries every diagnostic of a directory, at the place the
// JSON output gives, under a rule the log defines.
func TestValidateSARIF(t *testing.T) {
	out, _, exit := trellis(t, "validate", "--format", "sarif", examples)
	var log struct {
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string `json:"name"`
					Rules []struct {
						ID   string `json:"id"`
						Desc struct {
							Text string `json:"text"`
						} `json:"shortDescription"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string `json:"ruleId"`
				RuleIndex int    `json:"ruleIndex"`
				Level     string `json:"level"`
				Message   struct {
					Text string `json:"text"`
				} `json:"message"`
				Locations []struct {
					Physical struct {
						Artifact struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine   int `json:"startLine"`
							StartColumn int `json:"startColumn"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(out), &log); err != nil || exit != 1 || log.Version != "2.1.0" || len(log.Runs) != 1 {
		t.Fatalf("sarif: exit %d, %v\n%.500s", exit, err, out)
	}
	run := log.Runs[0]
	if len(run.Tool.Driver.Rules) != len(diag.Codes) {
		t.Fatalf("%d rules for %d codes", len(run.Tool.Driver.Rules), len(diag.Codes))
	}
	jsonOut, _, _ := trellis(t, "validate", "--format", "json", examples)
	var ds []struct {
		Code     string `json:"code"`
		Severity string `json:"severity"`
		File     string `json:"file"`
		Line     int    `json:"line"`
		Col      int    `json:"col"`
	}
	if err := unmarshalDiags(jsonOut, &ds); err != nil {
		t.Fatal(err)
	}
	if len(run.Results) != len(ds) || len(ds) == 0 {
		t.Fatalf("%d SARIF results for %d diagnostics", len(run.Results), len(ds))
	}
	for i, r := range run.Results {
		d := ds[i]
		rule := run.Tool.Driver.Rules[r.RuleIndex]
		loc := r.Locations[0].Physical
		if r.RuleID != d.Code || rule.ID != d.Code || rule.Desc.Text == "" || r.Level != d.Severity || r.Message.Text == "" ||
			loc.Artifact.URI != d.File || loc.Region.StartLine != d.Line || loc.Region.StartColumn != d.Col {
			t.Errorf("result %d %+v for diagnostic %+v", i, r, d)
		}
	}
}

// A prompt whose front matter does not parse gets that one error, not
// also a missing fallback it may well have.
func TestBrokenFrontMatterIsOneError(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(examples + "/P001.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flowFile := filepath.Join(dir, "flow.yaml")
	if err := os.WriteFile(flowFile, []byte(strings.Replace(string(src), "prompt: P001.bad", "prompt: broken", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "prompts"), 0o755)
	prompt := "---\ntemperature: [0.2\nfallback: done\n---\nSummarise {{.state.count}} in one line.\n"
	if err := os.WriteFile(filepath.Join(dir, "prompts", "broken.prompt"), []byte(prompt), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, exit := trellis(t, "validate", "--format", "json", flowFile)
	var ds []map[string]any
	if err := unmarshalDiags(out, &ds); err != nil || exit != 1 {
		t.Fatalf("exit %d, %v\n%s", exit, err, out)
	}
	if len(ds) != 1 || ds[0]["code"] != "Y001" || ds[0]["line"].(float64) != 2 || !strings.HasSuffix(ds[0]["file"].(string), "broken.prompt") {
		t.Fatalf("diagnostics %v, want one Y001 at the prompt's line 2", ds)
	}
}

// Every code is explained from its examples: what validate says of the
// failing one, and the change that fixes it.
func TestExplain(t *testing.T) {
	for _, c := range diag.Codes {
		out, stderr, exit := trellis(t, "explain", strings.ToLower(string(c.Code)))
		golden, _ := os.ReadFile(examples + "/" + string(c.Code) + ".bad.diags")
		firstLine, _, _ := strings.Cut(string(golden), "\n")
		if exit != 0 || !strings.HasPrefix(out, string(c.Code)+": "+c.Doc) || !strings.Contains(out, firstLine) ||
			!strings.Contains(out, "\n    + ") && !strings.Contains(out, "\n    - ") {
			t.Errorf("explain %s: exit %d %s\n%s", c.Code, exit, stderr, out)
		}
	}
	out, _, _ := trellis(t, "explain", "G013")
	if !strings.Contains(out, "ignore: [G013]") {
		t.Errorf("a warning's explanation says how to accept it:\n%s", out)
	}
	out, _, _ = trellis(t, "explain", "G001")
	if strings.Contains(out, "ignore:") {
		t.Errorf("an error's explanation offers to ignore it:\n%s", out)
	}
	if _, stderr, exit := trellis(t, "explain", "G0133"); exit != 2 || !strings.Contains(stderr, `did you mean "G013"?`) {
		t.Errorf("an unknown code: exit %d, %s", exit, stderr)
	}
	if out, _, exit := trellis(t, "explain"); exit != 0 || strings.Count(out, "\n") != len(diag.Codes) {
		t.Errorf("the list: exit %d\n%s", exit, out)
	}
}

// An assign expression that can yield a string its enum field does not
// allow is reported at the string, with a suggestion.
func TestAssignOutsideAnEnum(t *testing.T) {
	f := filepath.Join(t.TempDir(), "enum.yaml")
	src := `version: 1
name: f
state:
  schema:
    type: object
    properties:
      phase: {type: string, enum: [intro, closing, done], default: intro}
nodes:
  a: {kind: assign, set: {phase: "1 > 0 ? 'closng' : 'done'"}}
edges:
  - {from: START, to: a}
  - {from: a, to: END}
`
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, exit := trellis(t, "validate", "--format", "json", f)
	var ds []map[string]any
	if err := unmarshalDiags(out, &ds); err != nil || exit != 1 || len(ds) != 1 {
		t.Fatalf("exit %d %v\n%s", exit, err, out)
	}
	if ds[0]["code"] != "W004" || ds[0]["suggestion"] != "closing" || ds[0]["col"].(float64) != 43 {
		t.Fatalf("diagnostic %v", ds[0])
	}
}

// Every template scaffolds a flow that validates clean and whose tests
// pass; init never overwrites a file.
func TestInitTemplates(t *testing.T) {
	dir := t.TempDir()
	for _, tmpl := range []string{"linear", "router", "fanout", "loop", "chat"} {
		name := "my_" + tmpl
		if _, stderr, exit := trellis(t, "init", "--template", tmpl, name, dir); exit != 0 {
			t.Fatalf("init %s: exit %d %s", tmpl, exit, stderr)
		}
		flowFile := filepath.Join(dir, name+".yaml")
		if out, stderr, exit := trellis(t, "validate", flowFile); exit != 0 || out != "" {
			t.Errorf("%s does not validate clean: exit %d\n%s%s", tmpl, exit, out, stderr)
		}
		if out, stderr, exit := trellis(t, "test", filepath.Join(dir, name+".test.yaml")); exit != 0 || !strings.Contains(out+stderr, " passed, 0 failed") {
			t.Errorf("%s's tests: exit %d\n%s%s", tmpl, exit, out, stderr)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "my_chat.yaml"))
	if _, stderr, exit := trellis(t, "init", "--template", "linear", "my_chat", dir); exit != 1 || !strings.Contains(stderr, "exists") {
		t.Errorf("init over an existing flow: exit %d %s", exit, stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "my_chat.yaml")); !bytes.Equal(before, after) {
		t.Error("init overwrote a flow")
	}
	if _, _, exit := trellis(t, "init", "Bad-Name", dir); exit != 2 {
		t.Errorf("a name that is not snake_case: exit %d", exit)
	}
	if _, _, exit := trellis(t, "init", "--template", "nope", "x", dir); exit != 2 {
		t.Errorf("an unknown template: exit %d", exit)
	}
}

// A constant written to a field outside its bounds is reported, written
// as an expression or as a YAML literal.
func TestAssignOutOfRange(t *testing.T) {
	f := filepath.Join(t.TempDir(), "range.yaml")
	src := `version: 1
name: f
state:
  schema:
    type: object
    properties:
      n: {type: integer, default: 0, minimum: 0, maximum: 10}
      r: {type: number, default: 0.5, exclusiveMaximum: 1}
nodes:
  a: {kind: assign, set: {n: "-1", r: "1.0"}}
  b: {kind: assign, set: {n: 12, r: "0.5"}}
  c: {kind: assign, set: {n: "11 - 1", r: 0.25}}
edges:
  - {from: START, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: END}
`
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, exit := trellis(t, "validate", "--format", "json", f)
	var ds []map[string]any
	if err := unmarshalDiags(out, &ds); err != nil || exit != 1 {
		t.Fatalf("exit %d %v\n%s", exit, err, out)
	}
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%v:%v %v", d["line"], d["col"], d["message"]))
	}
	want := []string{
		`10:30 field "n" is at least 0, but this expression is always -1`,
		`10:39 field "r" is less than 1, but this expression is always 1`,
		`11:30 set.n: the field is at most 10, never 12`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diagnostics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
