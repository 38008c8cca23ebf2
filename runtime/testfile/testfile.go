// Package testfile runs flow test files: YAML files beside a flow that start
// threads with given values, run them through one or more turns with
// scripted node outputs, and check the path taken, visit counts, pauses
// and the state with expressions.
//
//	flow: resume_review.yaml
//	tests:
//	  - name: a reviewer fails and the review goes on
//	    with_file: examples/resume.yaml             # initial values from a file (beside the test file)
//	    with: {target_role: LLM Engineer}          # the thread's initial values (over the file's)
//	    script:                                     # per node, one entry per call
//	      recruiter:
//	        - error: model timed out                # the node fails (its fallback applies)
//	      tech_writer:
//	        - set: {tech_writer_feedback: {...}}    # the node writes exactly this
//	        - run: true                             # the node runs for real
//	      copywriter:
//	        - output: {score: 7, ...}               # the reply, checked against its schema
//	    tools:                                      # per tool, one entry per call
//	      get_weather:
//	        - result: {celsius: 21}                 # the call's result, instead of the tool's
//	        - error: no such city                   # the call fails; the model is told
//	        - run: true                             # the tool runs for real
//	    runs:                                       # one entry per run (default: one, no input)
//	      - input: {last_response: hi}
//	        config: {model: large}                  # the run's configuration
//	        expect:
//	          path: [router, [recruiter, tech_writer, copywriter], aggregator, portfolio]
//	          degraded: [recruiter]
//	          paused: [approve]                     # the run paused at approve (it asks)
//	          tools: [get_weather]                  # the tools it called, in any order
//	          state: ["state.recruiter_feedback.score == 5.0"]
//	          output: ["output contains 'Evaluation failed'"]  # over the flow's output
//	      - answers: {approve: true}                # resumes the paused run with the answer
//	      - thread: second                          # another thread of the same store
//	        with: {target_role: SRE}                # its initial values (over the test's)
//	    expect:                                     # after the last run
//	      visits: {revisor: 0}
//	      state: ["state.threshold_met"]
//	    reload: true                                # also with the state read back between steps
//
// A call beyond a node's script runs the real node. A map's items are
// scripted by their names, NODE[INDEX] (sections[1]), one script per
// item. Tools are scripted by name, one entry per call; a call beyond them
// runs the tool (offline, an llm node's calls are its fallback's). A
// scripted output the node refuses (a reply its prompt's schema
// does not allow) fails the test. A run that pauses must expect it
// (paused), and a later run resumes it (answers, or resume: true); a
// question asked inside a subflow or a map's item, at any depth, is
// expected and answered by its path (review/approve, items[2]/approve)
// or its id. With
// no model configured, llm nodes use their prompts' fallbacks, so tests
// are offline and deterministic. The file is checked like a flow: every
// problem at its line and column, in the file's terms.
//
// With reload (or Options.Reload), a test runs twice: in one process, and
// with its state encoded, stored and decoded between every step, as a
// process that picks the thread up reads it. Both runs must pass, and take
// the same paths to the same outputs and final states.
//
// Each test has a store of its own. Its runs go to one thread unless a run
// names another: the first run naming a thread creates it from the test's
// values overlaid by the run's with. The threads of a test share the
// store, and so what memory nodes remember (a second interview recalls
// the first); the state checked after the last run is that run's
// thread's.
package testfile

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/value"
)

// Suffix names flow test files.
const Suffix = ".test.yaml"

// File is a parsed test file.
type File struct {
	Path  string
	Flow  string
	Tests []Test
}

// Test is one test case.
type Test struct {
	Name string
	// WithFile names a YAML or JSON file of initial values, relative to
	// the test file; With's values go over them.
	WithFile string
	With     map[string]any
	Script   map[string][]Call
	// Tools scripts tool calls by tool name, one entry per call.
	Tools  map[string][]ToolCall
	Runs   []Run
	Expect *Expect
	// Reload runs the test with its state read back between steps too,
	// whatever Options.Reload says.
	Reload bool
	Pos    diag.Pos
	// scriptPos locates each node's script, toolPos each tool's.
	scriptPos, toolPos map[string]diag.Pos
}

// Call is one scripted node call: exactly one of Set (the node's update),
// Output (its output, for kinds that produce one, such as an llm node's
// reply: the node's writes still apply, and a reply its schema refuses
// fails the test), Error (the node fails) or Run (the node runs for real).
type Call struct {
	Set       map[string]any
	Output    any
	HasOutput bool
	Error     string
	Run       bool
	Pos       diag.Pos
}

// Run is one run of the thread: a new run with Input, or (Answers or
// Resume) the resumption of a run that paused, with the answers to its
// questions by node.
type Run struct {
	// Thread names the thread the run goes to (default: the test's
	// first); With gives a thread it creates its initial values, over the
	// test's.
	Thread string
	With   map[string]any
	Input  map[string]any
	// Config is the run's configuration (the flow's config block).
	Config  map[string]any
	Answers map[string]any
	Resume  bool
	// StopAfter, when set, stops the run at the boundary after its step
	// *StopAfter (0: once its input is applied, before its first
	// step), as a cancel or a crash leaves it, for an update to edit it
	// there and a resume to go on.
	StopAfter *int
	// Update, instead of a run, writes values to the thread as if a node
	// had (see engine.Update): a correction between runs, or of a run
	// stopped or paused.
	Update *Update
	Expect *Expect
	Pos    diag.Pos
}

// Update writes Values to the thread as node As would.
type Update struct {
	As     string
	Values map[string]any
}

// Expect holds assertions. Path lists each superstep's nodes (a name, or a
// list for a step running several); Visits counts node runs (over the run,
// or over the whole test at test level); State holds conditions over the
// state; Output holds conditions over output, the flow's declared output
// rendered over the state the run ended with (and over the state);
// Degraded lists the nodes that must have used a fallback, and no
// other node may have; Paused lists the nodes the run must have paused at
// (before or after them, or asking), and a run that pauses must say so;
// Error is a substring of the run's error, which then must fail.
type Expect struct {
	Path     []any
	Visits   map[string]int
	State    []string
	Output   []string
	Degraded *[]string
	Paused   *[]string
	// Tools lists the tools the run called, once per call, in any order.
	Tools *[]string
	Error string
	Pos   diag.Pos
	// statePos and outputPos locate each condition, pathPos the path.
	statePos, outputPos []diag.Pos
	pathPos             diag.Pos
}

// Result is one test's outcome.
type Result struct {
	Name     string
	Failures []string
	Took     time.Duration
}

// Passed reports whether the test passed.
func (r Result) Passed() bool { return len(r.Failures) == 0 }

// format is the test file format, checked like the flow format: every
// problem at its line and column, in the file's terms.
var format = sync.OnceValues(func() (*flow.Format, error) {
	str := func(name, doc string) config.Field { return config.String(name, doc) }
	names := func(name, doc string) config.Field { return config.List(name, doc, config.Elem(str("", ""))) }
	expect := config.Object("", "Assertions.",
		config.List("path", "Each superstep's nodes: a node's name, or a list of them for a step running several.",
			config.Elem(config.OneOf("", "", str("", ""), names("", "").NonEmpty(1)))),
		config.Map("visits", "How often each node ran.", config.Elem(config.Integer("", "").Min(0))),
		config.List("state", "Conditions over the state that must hold.", config.Elem(config.Condition("", ""))),
		config.List("output", "Conditions over output, the flow's declared output rendered over the final state (and over the state).", config.Elem(config.Condition("", ""))),
		names("degraded", "The nodes that used a fallback, and no other."),
		names("paused", "Where the run paused: the nodes it paused before or after, or that ask; inside a node (a subflow, a map's item), by path (review/approve, items[2]/approve)."),
		names("tools", "The tools the run called (by the names the model calls them), once per call, in any order: the run's trajectory (a call a person rejected was not made)."),
		str("error", "A part of the error the run must fail with.").NonEmpty(1),
	)
	call := config.Object("", "One scripted call: exactly one of set, output, error or run.",
		config.Map("set", "The node's update instead of its own: field to value.", nil),
		config.Any("output", "The node's output (an llm node's reply, checked against its schema): the node's writes apply to it."),
		str("error", "The node fails with this message.").NonEmpty(1),
		config.Bool("run", "The node runs for real."),
	).OnlyOneOf("set", "output", "error", "run").NonEmpty(1)
	run := config.Object("", "One run of the thread.",
		config.Map("input", "The run's input.", nil),
		config.Map("config", "The run's configuration.", nil),
		config.Map("answers", "Resume the paused run with these answers, each by the question's path (the asking node's name; inside a subflow or a map's item review/approve, items[2]/approve) or id.", nil),
		str("thread", "The thread the run goes to (default: the test's first); the first run naming a thread creates it.").NonEmpty(1),
		config.Map("with", "A new thread's initial values, over the test's.", nil),
		config.Bool("resume", "Resume the paused run (with answers, if any)."),
		config.Integer("stop_after", "Stop the run at the boundary after this step of it (0: before its first step), as a cancel leaves it: an update may then edit it, and a run with resume: true go on.").Min(0),
		config.Object("update", "Instead of a run, write values to the thread as a node would (through its reducers and declared writes), as trellis update does.",
			str("as", "The node the values are written as.").NonEmpty(1).Require(),
			config.Map("values", "Field to value.", nil).Require(),
		),
		config.Ref("expect", "What the run must do.", "expect"),
	)
	test := config.Object("", "One test: a thread, its runs and what they must do.",
		str("name", "What the test checks.").NonEmpty(1).Require(),
		str("with_file", "A YAML or JSON file of initial values, relative to this file; with's values go over them.").NonEmpty(1),
		config.Map("with", "The thread's initial values.", nil),
		config.Map("script", "Scripted calls by node (NODE[INDEX] for a map's item): one entry per call; a call beyond them runs the node.",
			config.Elem(config.List("", "", config.Elem(config.Ref("", "", "call"))))),
		ToolScriptsField("tools", "Scripted tool calls by tool name: one entry per call; a call beyond them runs the tool."),
		config.List("runs", "The runs, in order (default: one run with no input).", config.Elem(config.Ref("", "", "run"))),
		config.Ref("expect", "What must hold after the last run.", "expect"),
		config.Bool("reload", "Also run the test with the state encoded, stored and decoded between every step, as another process reads it back, whatever trellis test's --reload says: both runs must pass, the same way."),
	)
	root := config.Object("", "A flow test file.",
		str("flow", "The flow under test, relative to this file.").NonEmpty(1).Require(),
		config.Any("fixtures", "A free place for YAML anchors the tests share."),
		config.List("tests", "The tests.", config.Elem(config.Ref("", "", "test"))).Require(),
	)
	return flow.NewFormat("test file", root, map[string]config.Field{"expect": expect, "call": call, "run": run, "test": test})
})

// Load reads a test file. A file that does not parse or does not fit the
// test format is a *diag.ListError: every problem at its line and
// column, in the file's terms.
func Load(path string) (*File, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return LoadSource(path, src)
}

// LoadSource reads a test file's text as Load reads the file at path.
func LoadSource(path string, src []byte) (*File, error) {
	return flow.Read(path, src, "test file", format, func(doc *config.File, dl *diag.List) *File {
		return decode(path, doc, dl)
	})
}

// decode reads a test file that fits the format.
func decode(path string, doc *config.File, dl *diag.List) *File {
	root := doc.Root()
	f := &File{Path: path, Flow: root.Get("flow").Text()}
	values := func(v config.Value) map[string]any {
		if !v.Exists() {
			return nil
		}
		var raw any
		if err := v.Decode(&raw); err != nil { // (merge keys, <<, are resolved)
			dl.Errorf(diag.CodeType, v.Pos(), v.Path(), "%v", err)
			return nil
		}
		norm, err := value.Normalize(raw)
		if err != nil {
			dl.Errorf(diag.CodeType, v.Pos(), v.Path(), "%v", err)
			return nil
		}
		m, _ := norm.(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		return m
	}
	for _, tn := range root.Get("tests").Items() {
		t := Test{Name: tn.Get("name").Text(), With: values(tn.Get("with")), WithFile: tn.Get("with_file").Text(), Pos: tn.Pos(),
			scriptPos: map[string]diag.Pos{}, toolPos: map[string]diag.Pos{}}
		decodeTools(&t, tn.Get("tools"), dl)
		reload, _ := tn.Get("reload").JSON()
		t.Reload, _ = reload.(bool)
		if sc := tn.Get("script"); sc.Exists() {
			t.Script = map[string][]Call{}
			for _, e := range sc.Entries() {
				t.scriptPos[e.Name] = e.Key.Pos()
				for _, cn := range e.Value.Items() {
					c := Call{Pos: cn.Pos(), Error: cn.Get("error").Text()}
					run, _ := cn.Get("run").JSON()
					c.Run, _ = run.(bool)
					if s := cn.Get("set"); s.Exists() {
						c.Set = values(s)
					}
					if o := cn.Get("output"); o.Exists() {
						var raw any
						if err := o.Decode(&raw); err == nil {
							c.Output, err = value.Normalize(raw)
							if err != nil {
								dl.Errorf(diag.CodeType, o.Pos(), o.Path(), "%v", err)
							}
						}
						c.HasOutput = true
					}
					t.Script[e.Name] = append(t.Script[e.Name], c)
				}
			}
		}
		for _, rn := range tn.Get("runs").Items() {
			r := Run{Thread: rn.Get("thread").Text(), With: values(rn.Get("with")), Input: values(rn.Get("input")), Config: values(rn.Get("config")), Answers: values(rn.Get("answers")), Pos: rn.Pos(), Expect: expectOf(rn.Get("expect"))}
			resume, _ := rn.Get("resume").JSON()
			r.Resume, _ = resume.(bool)
			if stop, err := rn.Get("stop_after").JSON(); err == nil {
				if n, isInt := stop.(int); isInt {
					r.StopAfter = &n
				}
			}
			if (r.Resume || r.Answers != nil) && rn.Get("input").Exists() {
				dl.Errorf(diag.CodeConstraint, rn.KeyOf("input").Pos(), rn.Path(), "a run either resumes a paused one (answers, resume) or starts with input, not both")
			}
			if u := rn.Get("update"); u.Exists() {
				r.Update = &Update{As: u.Get("as").Text(), Values: values(u.Get("values"))}
				for _, k := range []string{"input", "answers", "resume", "config", "expect"} {
					if rn.Get(k).Exists() {
						dl.Errorf(diag.CodeConstraint, rn.KeyOf(k).Pos(), rn.Path(), "an update is not a run: it takes no %s", k)
					}
				}
			}
			t.Runs = append(t.Runs, r)
		}
		t.Expect = expectOf(tn.Get("expect"))
		f.Tests = append(f.Tests, t)
	}
	return f
}

func expectOf(v config.Value) *Expect {
	if !v.Exists() {
		return nil
	}
	ex := &Expect{Pos: v.Pos(), Error: v.Get("error").Text(), pathPos: v.Get("path").Pos()}
	if p := v.Get("path"); p.Exists() {
		raw, _ := p.JSON()
		ex.Path, _ = raw.([]any)
	}
	if vs := v.Get("visits"); vs.Exists() {
		ex.Visits = map[string]int{}
		for _, e := range vs.Entries() {
			n, _ := e.Value.JSON()
			ex.Visits[e.Name], _ = n.(int)
		}
	}
	for _, c := range v.Get("state").Items() {
		ex.State = append(ex.State, c.Text())
		ex.statePos = append(ex.statePos, c.Pos())
	}
	for _, c := range v.Get("output").Items() {
		ex.Output = append(ex.Output, c.Text())
		ex.outputPos = append(ex.outputPos, c.Pos())
	}
	list := func(name string) *[]string {
		l := v.Get(name)
		if !l.Exists() {
			return nil
		}
		out := []string{}
		for _, it := range l.Items() {
			out = append(out, it.Text())
		}
		return &out
	}
	ex.Degraded, ex.Paused, ex.Tools = list("degraded"), list("paused"), list("tools")
	return ex
}

// FlowPath is the flow file a test file tests.
func (f *File) FlowPath() string {
	if filepath.IsAbs(f.Flow) {
		return f.Flow
	}
	return filepath.Join(filepath.Dir(f.Path), f.Flow)
}
