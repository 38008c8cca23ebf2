package flows

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
)

// defect is one flow broken in one place: in file (relative to the
// repository), old becomes new; the validator must report code at the
// start of at, a part of new ("" for new itself). A file that does not
// exist yet is written whole from new.
type defect struct {
	name, flow, file, old, new, at string
	code                           diag.Code
}

const (
	interview = "flows/interview.yaml"
	review    = "flows/resume_review.yaml"
	fixture   = "runtime/diag/examples/G001.ok.yaml"
	tools     = "runtime/diag/examples/T001.ok.yaml"
)

// corpus breaks the reference flows (and the validator's base fixture)
// one defect at a time, the way a designer does: every rule code and every
// class of defect, each caught at its line and column.
var corpus = []defect{
	// YAML
	{name: "a tab-broken mapping", flow: interview, old: "  ingest_input:\n    kind: assign", new: "  ingest_input:\n    kind: assign\n   bad: [", at: "bad", code: diag.CodeYAML},
	{name: "a repeated key", flow: review, old: "    kind: noop\n    description: Starts", new: "    kind: noop\n    kind: noop\n    description: Starts", at: "kind: noop\n    description", code: diag.CodeDuplicate},
	{name: "a broken front matter in a prompt", flow: interview, file: "prompts/interview/closing.prompt", old: "temperature:", new: "temperature: [", at: "temperature", code: diag.CodeYAML},
	// the format
	{name: "a misspelt node key", flow: interview, old: "    kind: llm\n    prompt: interview/greeting", new: "    kind: llm\n    promt: interview/greeting", at: "promt", code: diag.CodeUnknownKey},
	{name: "a node without a kind", flow: review, old: "  router:\n    kind: noop\n", new: "  router:\n", at: "router", code: diag.CodeMissingKey},
	{name: "a limit that is not a number", flow: review, old: "limits: {max_steps: 60}", new: "limits: {max_steps: lots}", at: "lots", code: diag.CodeType},
	{name: "a durability not among the allowed", flow: fixture, old: "name: fixture", new: "name: fixture\nlimits: {max_steps: 0}", at: "0", code: diag.CodeConstraint},
	{name: "an on_error action that does not exist", flow: review, old: "    writes: {portfolio: output}", new: "    writes: {portfolio: output}\n    on_error: explode", at: "explode", code: diag.CodeNotAllowed},
	// node kinds
	{name: "a kind that does not exist", flow: review, old: "    kind: noop", new: "    kind: nop", at: "nop", code: diag.CodeUnknownKind},
	{name: "an llm node naming a missing prompt", flow: review, old: "prompt: resume_review/design", new: "prompt: resume_review/desing", at: "resume_review/desing", code: diag.CodeResource},
	{name: "a sandbox in an unknown language", flow: interview, old: "    language: python", new: "    language: pyhton", at: "pyhton", code: diag.CodeKindSetting},
	// the graph
	{name: "two nodes of one name", flow: fixture, old: "  second: {kind: assign, set: {summary: \"'done'\"}}", new: "  second: {kind: assign, set: {summary: \"'done'\"}}\n  first: {kind: noop}", at: "first: {kind: noop}", code: diag.CodeDuplicateNode},
	{name: "an edge to a node that does not exist", flow: review, old: "  - {from: design, to: END}", new: "  - {from: design, to: ENDD}", at: "ENDD", code: diag.CodeUnknownTarget},
	{name: "a node no edge reaches", flow: fixture, old: "nodes:", new: "nodes:\n  orphan: {kind: assign, set: {summary: \"'x'\"}}", at: "orphan", code: diag.CodeUnreachable},
	{name: "a node that never reaches END", flow: fixture, old: "  - {from: second, to: END}", new: "  - {from: second, to: second, bound: 3}", at: "second: {kind", code: diag.CodeNoPathToEnd},
	{name: "no edge leaves START", flow: fixture, old: "  - {from: START, to: first}\n", new: "", at: "", code: diag.CodeEntry},
	{name: "an edge into START", flow: review, old: "  - {from: design, to: END}", new: "  - {from: design, to: START}", at: "START", code: diag.CodeReserved},
	{name: "an edge with both to and branch", flow: review, old: "  - from: portfolio\n    branch:", new: "  - from: portfolio\n    to: design\n    branch:", at: "from", code: diag.CodeEdgeShape},
	{name: "a revise loop with no bound", flow: review, old: "  - from: revisor\n    bound: 10\n", new: "  - from: revisor\n", at: "from", code: diag.CodeUnboundedCycle},
	{name: "a join a branch can starve", flow: review, old: "  - {from: router, to: [recruiter, tech_writer, copywriter]}", new: "  - from: router\n    branch:\n      - {when: \"state.include_design\", to: recruiter}\n      - else: [tech_writer, copywriter]", at: "{from: [recruiter", code: diag.CodeJoinStarves},
	{name: "a route to a choice that is not a node", flow: interview, old: "choices: [plan_question, followup, transition, hint, redirect, sandbox_guidance, run_code, evaluation, closing]", new: "choices: [plan_question, followup, transition, hint, redirect, sandbox_guidance, run_code, evaluation, closng]", at: "closng", code: diag.CodeRouteChoice},
	{name: "a route that yields a number", flow: fixture, old: "  - {from: first, to: second}", new: "  - from: first\n    route: \"state.count\"\n    choices: [second]", at: "\"state.count\"", code: diag.CodeRouteType},
	{name: "a route literal among no choice", flow: interview, old: "'plan_question' : (state.next_node == 'code_review' ? 'run_code'", new: "'plan_questions' : (state.next_node == 'code_review' ? 'run_code'", at: "'plan_questions'", code: diag.CodeRouteYield},
	{name: "a branch with no else that is not exhaustive", flow: review, old: "      - when: \"state.include_design\"\n        to: design\n      - else: END", new: "      - when: \"state.include_design\"\n        to: design", at: "branch:\n      - when: \"state.include_design\"", code: diag.CodeBranchOpen},
	{name: "a route over an enum with a value that has no choice", flow: "runtime/diag/examples/G014.ok.yaml", old: "    choices: [second, END]", new: "    choices: [second]", at: "\"state.next\"", code: diag.CodeRouteEnum},
	// the state
	{name: "a state schema that is not valid JSON Schema", flow: fixture, old: "count: {type: integer, default: 0}", new: "count: {type: integr, default: 0}", at: "integr", code: diag.CodeStateSchema},
	{name: "a state schema that is not an object", flow: fixture, old: "    type: object\n    properties:", new: "    type: array\n    properties:", at: "type", code: diag.CodeStateShape},
	{name: "a reducer for a field that does not exist", flow: review, old: "    revisions: append", new: "    revision: append", at: "revision", code: diag.CodeReducerField},
	{name: "append on a field that is not a list", flow: review, old: "    revisions: append", new: "    final_score: append\n    revisions: append", at: "append", code: diag.CodeReducerType},
	{name: "a read-only field that does not exist", flow: interview, old: "readonly: [interview_id, user_id]", new: "readonly: [interview_id, user_idd]", at: "user_idd", code: diag.CodeReadOnly},
	{name: "a default that breaks its own schema", flow: fixture, old: "count: {type: integer, default: 0}", new: "count: {type: integer, default: zero}", at: "count", code: diag.CodeBadDefault},
	// writes and inputs
	{name: "a write to an undeclared field", flow: review, old: "writes: {portfolio: output}", new: "writes: {portfolios: output}", at: "portfolios", code: diag.CodeUndeclaredWrite},
	{name: "a read-only field written", flow: interview, old: "      turn_count: \"state.turn_count + 1\"", new: "      turn_count: \"state.turn_count + 1\"\n      user_id: \"'x'\"", at: "user_id", code: diag.CodeReadOnlyWrite},
	{name: "two parallel writers of a replace field", flow: review, old: "writes: {tech_writer_feedback: output}", new: "writes: {recruiter_feedback: output}", at: "recruiter_feedback", code: diag.CodeWriteConflict},
	{name: "an input that is not a field", flow: review, old: "input: [resume, target_role, include_design, review_sections]", new: "input: [resume, target_role, include_designs, review_sections]", at: "include_designs", code: diag.CodeUnknownInput},
	{name: "a string written to an integer", flow: interview, old: "turn_count: \"state.turn_count + 1\"", new: "turn_count: \"'one more'\"", at: "\"'one more'", code: diag.CodeWriteType},
	{name: "a cache key that leaves out what the node reads", flow: fixture, old: "  first: {kind: assign, set: {count: \"state.count + 1\", log: \"'first'\"}}", new: "  first: {kind: assign, cache: {key: \"state.summary\"}, set: {count: \"state.count + 1\", log: \"'first'\"}}", at: "\"state.summary\"", code: diag.CodeCacheKey},
	{name: "a half written to an integer", flow: interview, old: "turn_count: \"state.turn_count + 1\"", new: "turn_count: \"state.turn_count / 2\"", at: "\"state.turn_count / 2", code: diag.CodeWriteType},
	{name: "a literal outside a field's enum", flow: interview, old: "      phase: \"'technical'\"\n      last_node: \"'sandbox_guidance'\"", new: "      phase: \"'tecnical'\"\n      last_node: \"'sandbox_guidance'\"", at: "'tecnical'", code: diag.CodeWriteType},
	{name: "a constant below a minimum", flow: review, old: "      current_iteration: \"state.current_iteration + 1\"", new: "      current_iteration: \"-1\"", at: "\"-1", code: diag.CodeWriteType},
	{name: "a structured reply into a field of another shape", flow: review, old: "writes: {portfolio: output}", new: "writes: {recruiter_feedback: output}", at: "output", code: diag.CodeWriteType},
	{name: "a sandbox result into a string field", flow: interview, old: "      last_execution: output", new: "      last_node: output", at: "output", code: diag.CodeWriteType},
	// prompts and templates
	{name: "a prompt whose reply schema file is missing", flow: review, file: "prompts/resume_review/design.prompt", old: "  name: design\n  schema:\n    type: object\n", new: "  name: design\n  schema: nowhere.json\n  extra:\n    type: object\n", at: "nowhere.json", code: diag.CodeResource},
	{name: "a template reading a field that does not exist", flow: interview, file: "prompts/interview/closing.prompt", old: "{{.state.resume_structured.target_role}}", new: "{{.state.resume_structured.target_rol}}", at: "target_rol", code: diag.CodeTemplateField},
	{name: "a template comparing a number with a text", flow: interview, file: "prompts/interview/decide_next_action.prompt", old: "Answer quality (0-1): {{.state.answer_quality}}", new: "Answer quality (0-1): {{.state.answer_quality}}{{if gt .state.answer_quality \"0.5\"}} (good){{end}}", at: "gt", code: diag.CodeTemplateCompare},
	{name: "a template reading through a nullable value", flow: interview, file: "prompts/interview/evaluation.prompt", old: "Topics covered: {{join", new: "Last execution: {{.state.last_execution.status}}. Topics covered: {{join", at: "status", code: diag.CodeTemplateNull},
	// expressions
	{name: "a syntax error in an expression", flow: interview, old: "turn_count: \"state.turn_count + 1\"", new: "turn_count: \"state.turn_count +\"", at: "+\"", code: diag.CodeExprSyntax},
	{name: "a condition that is not boolean", flow: review, old: "      - when: \"state.include_design\"", new: "      - when: \"state.target_role\"", at: "state.target_role", code: diag.CodeExprNotBool},
	{name: "a misspelt field in a condition", flow: review, old: "      - when: \"state.include_design\"", new: "      - when: \"state.include_desing\"", at: "include_desing", code: diag.CodeExprUnknown},
	{name: "a misspelt field in a write", flow: interview, old: "turn_count: \"state.turn_count + 1\"", new: "turn_count: \"state.turn_cont + 1\"", at: "turn_cont", code: diag.CodeExprUnknown},
	{name: "a read through a value that may be null", flow: interview, old: "    prompt: interview/evaluation\n", new: "    prompt: interview/evaluation\n    vars: {status: \"state.last_execution.status\"}\n", at: "status\"}", code: diag.CodeExprMayBeNil},
	{name: "an enum compared with a value it never has", flow: interview, old: "  until: \"state.phase == 'done'\"", new: "  until: \"state.phase == 'don'\"", at: "'don'", code: diag.CodeExprEnum},
	{name: "a read of a field a path leaves unwritten", flow: "runtime/diag/examples/E006.ok.yaml", old: "state.summary ?? 'nothing yet'", new: "state.summary", at: "summary", code: diag.CodeExprUnset},
	// nullable, enum and open-object typing
	{name: "a nullable number compared with a string", flow: interview, old: "state.sandbox.is_active && state.sandbox.exercise != nil &&", new: "state.sandbox.is_active && state.sandbox.exercise_turn > 'three' && state.sandbox.exercise != nil &&", at: "> 'three'", code: diag.CodeExprSyntax},
	{name: "arithmetic on a nullable string", flow: interview, old: "      run: state.last_execution\n", new: "      run: state.last_execution\n      bad: \"state.next_node + 1\"\n", at: "+ 1", code: diag.CodeExprSyntax},
	{name: "a misspelt member of an open object", flow: interview, old: "      run: state.last_execution\n", new: "      run: state.last_execution\n      st: \"state.resume_structured.target_rol\"\n", at: "target_rol", code: diag.CodeExprUnknown},
	{name: "a misspelt member in a template range", flow: interview, file: "prompts/interview/evaluation.prompt", old: "{{range .state.conversation_history}}{{.role}}", new: "{{range .state.conversation_history}}{{.rol}}", at: "rol", code: diag.CodeTemplateField},
	// reducers and routing classes
	{name: "a union keyed by a property the items lack", flow: interview, old: "    topics_covered: union", new: "    topics_covered: {union: {key: id}}", at: "id", code: diag.CodeReducerType},
	{name: "a conversation that ends on a non-boolean", flow: interview, old: "  until: \"state.phase == 'done'\"", new: "  until: \"state.phase\"", at: "state.phase", code: diag.CodeExprNotBool},
	{name: "a route choice no value leads to", flow: "runtime/diag/examples/G014.ok.yaml", old: "    choices: [second, END]", new: "    choices: [second, END, first]", at: "first]", code: diag.CodeRouteEnum},
	{name: "a route yielding a node not among the choices", flow: interview, old: "? 'plan_question' : (state.next_node == 'code_review' ? 'run_code'", new: "? 'plan_question' : (state.next_node == 'code_review' ? 'code_review'", at: "'code_review' :", code: diag.CodeRouteYield},
	// more writes, fields and edges of the reference flows
	{name: "a writes entry of an llm node to a missing field", flow: interview, old: "      next_message: output.message\n      phase: \"'technical'\"\n      last_node: \"'code_review'\"", new: "      next_mesage: output.message\n      phase: \"'technical'\"\n      last_node: \"'code_review'\"", at: "next_mesage", code: diag.CodeUndeclaredWrite},
	{name: "an edge from a node that does not exist", flow: interview, old: "  - {from: mark_idle, to: read_answer}", new: "  - {from: mark_idel, to: read_answer}", at: "mark_idel", code: diag.CodeUnknownTarget},
	{name: "a node listed twice in a fan-out", flow: review, old: "  - {from: router, to: [recruiter, tech_writer, copywriter]}", new: "  - {from: router, to: [recruiter, tech_writer, copywriter, recruiter]}", at: "[recruiter, tech_writer, copywriter, recruiter]", code: diag.CodeConstraint},
	{name: "a sandbox limit out of range", flow: interview, old: "limits: {wall_time: 10s, cpu_time: 5s, memory_mb: 256}", new: "limits: {wall_time: 10s, cpu_time: 5s, memory_mb: 2}", at: "2}", code: diag.CodeConstraint},
	{name: "a sandbox code expression that is not text", flow: interview, old: "    code: state.current_code", new: "    code: state.turn_count", at: "state.turn_count", code: diag.CodeKindSetting},
	{name: "a misspelt field in the sandbox tests", flow: interview, old: "    tests: state.sandbox.exercise?.tests ?? []", new: "    tests: state.sandbox.exercize?.tests ?? []", at: "exercize", code: diag.CodeExprUnknown},
	// composition and run configuration
	{name: "a subflow file that does not exist", flow: interview, old: "    flow: resume_review.yaml", new: "    flow: resume_reveiw.yaml", at: "resume_reveiw.yaml", code: diag.CodeSubflow},
	{name: "a flow that runs itself as a subflow", flow: "runtime/diag/examples/C002.ok.yaml", old: "    flow: subflows/summary.yaml", new: "    flow: C002.ok.yaml", at: "C002.ok.yaml", code: diag.CodeSubflowCycle},
	{name: "a subflow input naming a field the child lacks", flow: interview, old: "      review_sections: \"true\"", new: "      review_section: \"true\"", at: "review_section", code: diag.CodeSubflowMapping},
	{name: "a map over a value that is not a list", flow: review, old: "    items: \"take(state.resume?.experience ?? [], state.max_sections)\"", new: "    items: \"state.target_role\"", at: "\"state.target_role", code: diag.CodeMapNode},
	{name: "a map's node writing a replace field", flow: review, old: "      writes: {section_feedback: output}", new: "      writes: {section_feedback: output, final_score: output.score}", at: "final_score", code: diag.CodeMapNode},
	{name: "a run configuration entry with an invalid schema", flow: "runtime/diag/examples/C005.ok.yaml", old: "{type: string, default: done}", new: "{type: strng, default: done}", at: "strng", code: diag.CodeConfig},
	// tools
	{name: "an llm node naming a tool the flow does not declare", flow: tools, old: "tools: [lookup]", new: "tools: [lokup]", at: "lokup", code: diag.CodeToolName},
	{name: "a tool whose parameters are not an object", flow: tools, old: "parameters: {type: object, properties: {word: {type: string}}, required: [word]}", new: "parameters: {type: array}", at: "{type: array}", code: diag.CodeToolSetting},
	{name: "an MCP server with no pinned copy where it is not asked", flow: "runtime/diag/examples/T003.ok.yaml", old: "pin: T003.samples.mcp.json", new: "pin: missing.mcp.json", at: "missing.mcp.json", code: diag.CodeToolServer},
	{name: "an http tool calling a host its allow-list does not hold", flow: tools, old: "allow: [dictionary.example.com]", new: "allow: [dictionary.example.net]", at: "\"https://dictionary", code: diag.CodeToolReach},
}

// copyTree copies the repository's flows, prompts, schemas and the
// validator's fixtures under dir.
func copyTree(t *testing.T, dir string) {
	t.Helper()
	for _, root := range []string{"../flows", "../prompts", "../schemas", "../runtime/diag/examples"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel("..", p)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			dst := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestBrokenFlowCorpus breaks the reference flows one defect at a time:
// every defect is reported, with its code, at its line and column, and
// together they cover every code the validator has.
func TestBrokenFlowCorpus(t *testing.T) {
	if len(corpus) < 60 {
		t.Fatalf("the corpus holds %d broken flows, fewer than 60", len(corpus))
	}
	dir := t.TempDir()
	copyTree(t, dir)
	reg := all.Offline()
	covered := map[diag.Code]bool{}
	for _, d := range corpus {
		file := d.file
		if file == "" {
			file = d.flow
		}
		path := filepath.Join(dir, file)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(orig)
		if strings.Count(text, d.old) != 1 {
			t.Errorf("%s: %q is in %s %d times", d.name, d.old, file, strings.Count(text, d.old))
			continue
		}
		broken := strings.Replace(text, d.old, d.new, 1)
		// where the defect is: the start of at within the new text
		off := strings.Index(text, d.old)
		if d.at != "" {
			// in the new text, else (a defect reported elsewhere, such as
			// at the node an edge strands) anywhere in the broken file
			if i := strings.Index(d.new, d.at); i >= 0 {
				off += i
			} else if i := strings.Index(broken, d.at); i >= 0 {
				off = i
			} else {
				t.Errorf("%s: %q is not in the broken file", d.name, d.at)
				continue
			}
		}
		line := strings.Count(broken[:off], "\n") + 1
		col := len([]rune(broken[strings.LastIndex(broken[:off], "\n")+1:off])) + 1
		if d.at == "" && d.new == "" {
			line, col = 0, 0 // a removal: anywhere in the file
		}
		if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
			t.Fatal(err)
		}
		_, dl := flow.Load(filepath.Join(dir, d.flow), reg)
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range dl {
			if x.Code == d.code && filepath.Base(x.Pos.File) == filepath.Base(file) && (line == 0 || x.Pos.Line == line && x.Pos.Col == col) {
				found = true
			}
		}
		if !found {
			var got []string
			for _, x := range dl {
				got = append(got, x.String())
			}
			t.Errorf("%s: want %s at %s:%d:%d; got:\n%s", d.name, d.code, file, line, col, strings.Join(got, "\n"))
			continue
		}
		covered[d.code] = true
	}
	for _, c := range diag.Codes {
		if !covered[c.Code] {
			t.Errorf("no broken flow of the corpus raises %s (%s)", c.Code, c.Doc)
		}
	}
}
