package diag

// Code identifies a kind of problem. Codes are stable: tools and CI
// annotations match on them, and every code has a failing and a passing
// fixture (Examples).
type Code string

// The codes, by the phase that reports them. Codes lists them with their
// descriptions.
const (
	// Reading files.
	CodeYAML      Code = "Y001"
	CodeDuplicate Code = "Y002"

	// The flow format (its JSON Schema).
	CodeUnknownKey  Code = "S001"
	CodeMissingKey  Code = "S002"
	CodeType        Code = "S003"
	CodeNotAllowed  Code = "S004"
	CodeConstraint  Code = "S005"
	CodeUnknownKind Code = "K001"
	CodeKindSetting Code = "K002"

	// The graph.
	CodeUnknownTarget  Code = "G001"
	CodeDuplicateNode  Code = "G002"
	CodeUnreachable    Code = "G003"
	CodeNoPathToEnd    Code = "G004"
	CodeEntry          Code = "G005"
	CodeReserved       Code = "G006"
	CodeEdgeShape      Code = "G007"
	CodeUnboundedCycle Code = "G008"
	CodeJoinStarves    Code = "G009"
	CodeRouteChoice    Code = "G010"
	CodeRouteType      Code = "G011"
	CodeRouteYield     Code = "G012"
	CodeBranchOpen     Code = "G013"
	CodeRouteEnum      Code = "G014"

	// The state.
	CodeStateSchema  Code = "D001"
	CodeStateShape   Code = "D002"
	CodeReducerField Code = "D003"
	CodeReducerType  Code = "D004"
	CodeReadOnly     Code = "D005"
	CodeBadDefault   Code = "D006"

	// Writes and inputs.
	CodeUndeclaredWrite Code = "W001"
	CodeWriteConflict   Code = "W002"
	CodeReadOnlyWrite   Code = "W003"
	CodeUnknownInput    Code = "I001"
	CodeWriteType       Code = "W004"
	CodeCacheKey        Code = "W005"

	// Files a node reads (prompts) and the templates in them.
	CodeResource        Code = "P001"
	CodeTemplateField   Code = "P002"
	CodeTemplateNull    Code = "P003"
	CodeTemplateCompare Code = "P004"
	CodeTemplateCall    Code = "P005"

	// Expressions.
	CodeExprSyntax   Code = "E001"
	CodeExprNotBool  Code = "E002"
	CodeExprUnknown  Code = "E003"
	CodeExprMayBeNil Code = "E004"
	CodeExprEnum     Code = "E005"
	CodeExprUnset    Code = "E006"

	// Composition and run configuration.
	CodeSubflow        Code = "C001"
	CodeSubflowCycle   Code = "C002"
	CodeSubflowMapping Code = "C003"
	CodeMapNode        Code = "C004"
	CodeConfig         Code = "C005"
	CodeNotInteractive Code = "C006"

	// Tools.
	CodeToolName    Code = "T001"
	CodeToolSetting Code = "T002"
	CodeToolServer  Code = "T003"
	CodeToolReach   Code = "T004"
)

// CodeDoc is one code and what it means.
type CodeDoc struct {
	Code Code
	Doc  string
}

// Codes describes every code, in the order of the constants above.
var Codes = []CodeDoc{
	{CodeYAML, "the file is not valid YAML or cannot be read"},
	{CodeDuplicate, "a mapping repeats a key"},
	{CodeUnknownKey, "a key the flow format does not have"},
	{CodeMissingKey, "a required key is missing"},
	{CodeType, "a value has the wrong type"},
	{CodeNotAllowed, "a value is not one of the allowed values"},
	{CodeConstraint, "a value breaks another rule of the flow format"},
	{CodeUnknownKind, "a node kind that is not registered"},
	{CodeKindSetting, "a node kind rejected its settings"},
	{CodeUnknownTarget, "an edge names a node that does not exist"},
	{CodeDuplicateNode, "two nodes share a name"},
	{CodeUnreachable, "no path from START reaches the node"},
	{CodeNoPathToEnd, "the node can never reach END"},
	{CodeEntry, "no edge leaves START"},
	{CodeReserved, "START used as a target, END as a source, or either as a node name"},
	{CodeEdgeShape, "an edge is not exactly one of to, branch or route, or a case is malformed"},
	{CodeUnboundedCycle, "a cycle with no bounded edge"},
	{CodeJoinStarves, "a join can wait forever because a branch can skip one of its sources"},
	{CodeRouteChoice, "a route choice or default that is not a node"},
	{CodeRouteType, "a route expression whose value is not a string, so never a node's name"},
	{CodeRouteYield, "a route expression can yield a name that is not among its choices"},
	{CodeRouteEnum, "a route over an enum field: a value with no choice and no default (an error), or a choice no value leads to (a warning)"},
	{CodeBranchOpen, "a branch without else whose conditions may all be false: the run would fail with no case matched"},
	{CodeStateSchema, "the state schema cannot be read or is not a valid JSON Schema"},
	{CodeStateShape, "the state schema is not an object with properties"},
	{CodeReducerField, "a reducer for a field the state does not declare"},
	{CodeReducerType, "a reducer that cannot apply to its field's type"},
	{CodeReadOnly, "a read-only field that is not declared, or that is also an input"},
	{CodeBadDefault, "a default that violates its field's schema"},
	{CodeUndeclaredWrite, "a node writes a field the state does not declare"},
	{CodeWriteConflict, "two nodes that can run in one superstep replace the same field"},
	{CodeReadOnlyWrite, "a node writes a read-only field"},
	{CodeUnknownInput, "an input field the state does not declare"},
	{CodeWriteType, "a node writes a value of a type its field cannot hold, through the field's reducer; as a warning, text the node does not control into a field with an enum, a pattern or lengths"},
	{CodeCacheKey, "a cached node's key leaves out something the node reads, so a later run with the same key replays writes made for another value of it"},
	{CodeResource, "a file a node reads (a prompt) cannot be found, parsed or compiled"},
	{CodeTemplateField, "a template reads a field the state, the input or the node's variables do not have (a warning where the object's schema leaves it open)"},
	{CodeTemplateNull, "a template reads a field of a value that may be null outside a with or if on that value"},
	{CodeTemplateCompare, "a template compares values of kinds that never compare (a number with a text, a boolean or a list ordered), which fails when it renders"},
	{CodeTemplateCall, "a template calls a function with an argument of a type it does not take (a number to upper, a text to join, a number of items that is not whole), or printf with verbs its values do not fill or do not print; a warning where the argument may be null, or fails for some of its values only"},
	{CodeExprSyntax, "an expression does not parse or does not type-check"},
	{CodeExprNotBool, "a condition that is not boolean"},
	{CodeExprUnknown, "an expression reads a field or name that does not exist (a warning where the object's schema leaves it open)"},
	{CodeExprEnum, "an expression compares a field with a string its enum does not allow, which it can never equal"},
	{CodeExprMayBeNil, "an expression reads a field of a value that may be null, where no node has set it on every path, without ?. or a nil test"},
	{CodeExprUnset, "an expression or template reads a field with no default (an input too) that a way from START reaches unwritten (no writer on it, a writer in the same step, a map's items or on_error only), where reading nothing fails (an operation on it, a write of it where null is not allowed, a template printing it) and no ?? or nil test (with or if in a template) guards it; or a subflow's writes read a field the child may end without"},
	{CodeSubflow, "a subflow's flow file cannot be read, or has errors of its own (reported in its file)"},
	{CodeSubflowCycle, "flows that include each other as subflows, directly or through others"},
	{CodeSubflowMapping, "a subflow's input, state or config names what the child flow does not have (an input it does not declare, a field or config key it lacks), or leaves out an input the child reads or a field it requires"},
	{CodeMapNode, "a map's items are not a list, or its node is one that cannot run per item: one that sets on_error, interrupt_before or interrupt_after, may pause for a tool call's approval, or writes a field whose reducer takes one write per step"},
	{CodeConfig, "a run configuration entry whose schema is invalid or whose default the schema refuses"},
	{CodeNotInteractive, "a flow marked interactive: false (nobody answers its runs) may pause: at a node that asks or pauses before or after it, in a map's items or in a subflow at any depth (a warning, with the path of the pause)"},
	{CodeToolName, "an llm node names a tool the flow's tools block does not declare, or two tools it may call share a name (as a warning, a declared tool no node calls)"},
	{CodeToolSetting, "a tool's settings are wrong: its kind, parameters or response schema, templates, result expression, approval, or a missing description, or a flow tool whose flow may pause for a person"},
	{CodeToolServer, "an MCP server's tools cannot be known: the server does not answer and there is no pinned copy, the pinned copy cannot be read, or it differs from what the server lists"},
	{CodeToolReach, "an http tool's address is not one its allow-list permits, or an allow-list entry is malformed"},
}

// Doc returns what code means, or "" for a code that does not exist.
func (c Code) Doc() string {
	for _, d := range Codes {
		if d.Code == c {
			return d.Doc
		}
	}
	return ""
}
