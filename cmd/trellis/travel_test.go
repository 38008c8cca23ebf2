package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// step is one line of trellis history.
type step struct {
	seq          int
	source       string
	nodes, next  string
	line         string
	branchOf     int
	forkedFromAt int
}

var historyLine = regexp.MustCompile(`^(\d+)\t\S+ \S+\t(\S+)\s+step \d+\s+nodes \[([^\]]*)\] wrote \[[^\]]*\](?: next \[([^\]]*)\])?`)

// history lists a thread's checkpoints, oldest first.
func history(t *testing.T, db, thread string) []step {
	t.Helper()
	out, errs, code := trellis(t, "history", thread, "--limit", "1000", "--store", db)
	if code != 0 {
		t.Fatalf("history %s: %d %s", thread, code, errs)
	}
	var steps []step
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		m := historyLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("history line %q", l)
		}
		s := step{source: m[2], nodes: m[3], next: m[4], line: l}
		s.seq, _ = strconv.Atoi(m[1])
		if b := regexp.MustCompile(`branch of (\d+)`).FindStringSubmatch(l); b != nil {
			s.branchOf, _ = strconv.Atoi(b[1])
		}
		if f := regexp.MustCompile(`forked from \S+ at (\d+)`).FindStringSubmatch(l); f != nil {
			s.forkedFromAt, _ = strconv.Atoi(f[1])
		}
		steps = append([]step{s}, steps...)
	}
	return steps
}

// pathAfter is the nodes of the steps after checkpoint seq, up to the
// first checkpoint that leaves nothing to run.
func pathAfter(steps []step, seq int) []string {
	var out []string
	for _, s := range steps {
		if s.seq <= seq || s.source != "step" {
			continue
		}
		out = append(out, s.nodes)
		if s.next == "" {
			break
		}
	}
	return out
}

// On SQLite and PostgreSQL, from the command line: two interview turns;
// a fork at the checkpoint initialize wrote (next: greeting) carries the
// greeting, and resumed it takes the original's path to the same state;
// an update at that checkpoint branches the thread, and resumed it goes
// on over the edit; the thread made into a flow test passes offline, its
// model replies from the cassette.
func TestForkBranchAndTestFromThreadInTheTerminal(t *testing.T) {
	b, err := os.ReadFile("../../flows/examples/interview.model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []llmtest.Rule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for name, db := range map[string]string{
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "t.db"),
		"postgres": storetest.Postgres(t),
	} {
		t.Run(name, func(t *testing.T) {
			model := llmtest.New(rules...)
			srv := httptest.NewServer(model)
			defer srv.Close()
			t.Setenv("OPENAI_BASE_URL", srv.URL+"/v1")
			t.Setenv("OPENAI_API_KEY", "sk-test")
			t.Setenv("TRELLIS_MODEL", "scripted")
			var out, errb strings.Builder
			code := cli.Main([]string{"run", "../../flows/interview.yaml", "--with", "../../flows/examples/candidate.yaml", "--store", db, "--thread", "c1"},
				&cli.Env{Stdin: strings.NewReader("I build data pipelines in Go and PostgreSQL at Northwind.\n"), Stdout: &out, Stderr: &errb,
					Registry: all.Registry(), Offline: all.Offline(),
					WithModel: func(p *llm.Provider) kind.Registry { return all.WithProvider(func() *llm.Provider { return p }) }})
			if code != 0 || !strings.Contains(out.String(), "Welcome Ada!") {
				t.Fatalf("two turns: %d\n%s%s", code, out.String(), errb.String())
			}
			c1 := history(t, db, "c1")
			at := 0
			var atStep step
			for _, s := range c1 {
				if s.nodes == "initialize" && s.next == "greeting" {
					at, atStep = s.seq, s
				}
			}
			if at == 0 {
				t.Fatalf("no checkpoint of initialize with greeting next:\n%v", c1)
			}
			n := strconv.Itoa(at)
			if _, errs, code := trellis(t, "fork", "c1", "--at", n, "--to", "c2", "--store", db); code != 0 {
				t.Fatalf("fork: %s", errs)
			}
			c2 := history(t, db, "c2")
			if len(c2) != 1 || c2[0].source != "fork" || c2[0].next != "greeting" || c2[0].forkedFromAt != at {
				t.Fatalf("the fork's history: %+v", c2)
			}
			if out, errs, code := trellis(t, "run", "../../flows/interview.yaml", "--thread", "c2", "--resume", "--store", db); code != 0 {
				t.Fatalf("resume the fork: %d\n%s%s", code, out, errs)
			}
			got, want := pathAfter(history(t, db, "c2"), 1), pathAfter(c1, at)
			if strings.Join(got, " / ") != strings.Join(want, " / ") || len(got) == 0 {
				t.Errorf("the fork went %v; the original from %d went %v", got, at, want)
			}
			end := 0
			for _, s := range c1 {
				if s.seq > at && s.next == "" && end == 0 {
					end = s.seq
				}
			}
			fork, _, _ := trellis(t, "state", "c2", "--store", db)
			orig, _, _ := trellis(t, "state", "c1", "--at", strconv.Itoa(end), "--store", db)
			if fork != orig {
				t.Errorf("the fork's state after its greeting:\n%s\nthe original's at %d:\n%s", fork, end, orig)
			}

			// a branch at the same checkpoint: the candidate is one the
			// interviews asked before
			_, errs, code := trellis(t, "update", "../../flows/interview.yaml", "c1", "--as", "recall_questions", "--at", n,
				"--set", `previous_questions=[{text: "What is a goroutine?", interview_id: "earlier"}]`, "--store", db)
			if code != 0 || !strings.Contains(errs, "a branch of checkpoint "+n) || !strings.Contains(errs, "goes on with [greeting]") {
				t.Fatalf("update at %d: %d %s", at, code, errs)
			}
			c1 = history(t, db, "c1")
			top := c1[len(c1)-1]
			if top.source != "update" || top.branchOf != at || top.next != "greeting" {
				t.Fatalf("the branch: %+v", top)
			}
			if out, errs, code := trellis(t, "run", "../../flows/interview.yaml", "--thread", "c1", "--resume", "--store", db); code != 0 {
				t.Fatalf("resume the branch: %d\n%s%s", code, out, errs)
			}
			if got := pathAfter(history(t, db, "c1"), top.seq); strings.Join(got, " / ") != "greeting / finalize_turn" {
				t.Errorf("the branch went %v", got)
			}
			st, _, _ := trellis(t, "state", "c1", "--store", db)
			if !strings.Contains(st, "What is a goroutine?") {
				t.Errorf("the branch's state lost the edit:\n%s", st)
			}
			last := 0
			for _, c := range model.Calls() {
				if strings.Contains(c.Messages[len(c.Messages)-1].Content, "They have interviewed with us before") {
					last++
				}
			}
			if last != 1 {
				t.Errorf("the greeting was asked over the edit %d times", last)
			}

			// the branched thread and the fork, made into flow tests, pass
			// with no model
			dir := t.TempDir()
			for _, thread := range []string{"c1", "c2"} {
				file := filepath.Join(dir, thread+".test.yaml")
				out, errs, code := trellis(t, "test", "--from-thread", thread, "--store", db, "--out", file, "../../flows/interview.yaml")
				if code != 0 || !strings.Contains(out+errs, "1 passed, 0 failed") {
					t.Fatalf("test --from-thread %s: %d\n%s%s", thread, code, out, errs)
				}
				text, _ := os.ReadFile(file)
				if thread == "c1" && (!strings.Contains(string(text), "stop_after: "+strconv.Itoa(atStepNumber(t, db, atStep))) || !strings.Contains(string(text), "as: recall_questions")) {
					t.Errorf("the branched thread's test:\n%s", text)
				}
				if _, err := os.Stat(filepath.Join(dir, thread+".cassette.yaml")); err != nil {
					t.Errorf("no cassette beside the test of %s: %v", thread, err)
				}
			}
			calls := len(model.Calls())
			t.Setenv("OPENAI_BASE_URL", "")
			t.Setenv("OPENAI_API_KEY", "")
			out2, errs2, code := trellis(t, "test", dir)
			if code != 0 || !strings.Contains(out2+errs2, "2 passed, 0 failed") {
				t.Fatalf("the tests made of the threads, offline: %d\n%s%s", code, out2, errs2)
			}
			if len(model.Calls()) != calls {
				t.Errorf("the tests called the model")
			}
			// the flow changed: the test fails
			text, _ := os.ReadFile(filepath.Join(dir, "c2.test.yaml"))
			broken := strings.Replace(string(text), "greeting, finalize_turn", "finalize_turn, greeting", 1)
			if broken == string(text) {
				broken = regexp.MustCompile(`path: \[([^\]]*)\]`).ReplaceAllString(string(text), "path: [$1, greeting]")
			}
			if err := os.WriteFile(filepath.Join(dir, "c2.test.yaml"), []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, _, code := trellis(t, "test", filepath.Join(dir, "c2.test.yaml")); code == 0 {
				t.Errorf("a test expecting another path passed:\n%s", out)
			}
		})
	}
}

// atStepNumber is the run step of the checkpoint s of thread c1 (what a
// test stops its run after).
func atStepNumber(t *testing.T, db string, s step) int {
	m := regexp.MustCompile(`step (\d+)`).FindStringSubmatch(s.line)
	if m == nil {
		t.Fatalf("no step in %q", s.line)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
