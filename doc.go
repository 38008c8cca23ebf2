// Package trellis runs declarative graph flows: stateful, LLM-driven
// workflows whose state schema, reducers, nodes, edges, routing
// expressions and prompt templates live in YAML files that designers
// edit. A Go program embeds Trellis through this package; the trellis
// command line is built on it too.
//
// # Loading a flow
//
// Load reads a flow file from the disk, LoadFS from an fs.FS (so a flow,
// its prompts and its schemas can be compiled into the program with
// go:embed). Loading validates everything before anything runs: the file
// format, the state schema, every expression and template against the
// state's fields, the graph (reachability, unbounded loops, joins that can
// starve, two nodes replacing one field in one step). A flow with errors
// is a *LoadError holding every problem with its file:line:col, never
// just the first:
//
//	f, err := trellis.Load("flows/interview.yaml")
//	var le *trellis.LoadError
//	if errors.As(err, &le) {
//		le.Print(os.Stderr) // every problem, with its source line
//	}
//
// Nodes are built from the built-in kinds (assign, render, llm, sandbox,
// interrupt, subflow, map, noop; nodes/README.md lists their settings). An llm node
// calls the OpenAI-compatible endpoint the environment names
// (OPENAI_BASE_URL, OPENAI_API_KEY, TRELLIS_MODEL); with no model
// configured, or with the Offline option, it writes its prompt's fallback,
// so every flow runs end to end, deterministically. A flow's tools block
// declares what its llm nodes may call (http, flow, mcp and sandbox tool
// kinds); the model's calls are checked, approved where the tool says so
// (the run pauses with the call, and a Resume WithAnswers goes on), run
// and fed back, each kept as it completes so that a resumed run never
// makes a finished call again.
//
// # Running
//
// A Runtime runs flows against a checkpoint store. Open opens one by
// address: "memory", "sqlite:PATH" (the embedded default,
// sqlite:.trellis/trellis.db) or a postgres:// URL; a store package of
// your own registers its scheme with store.Register. A thread is one
// conversation (one interview); a run is one turn of it:
//
//	rt, err := trellis.Open(ctx, "sqlite:app.db")
//	defer rt.Close()
//	res, err := rt.Run(ctx, f, "thread-1", map[string]any{"last_response": "Hi"})
//	fmt.Println(res.State["next_message"])
//
// Every superstep is checkpointed before the next one starts, so a run
// that dies (a crashed process) resumes with Resume without running a
// completed node again. Runs on one thread never overlap, across processes
// sharing a store too: a second run on a busy thread fails with ErrBusy.
//
// Stream runs like Run and yields the run's events as they happen: node
// starts and ends, retries, a model's tokens, each committed step.
// WithStop ends a run at its next step boundary (for a graceful shutdown),
// and WithRunID names a run so that starting it again, after a crash,
// continues it rather than applying its input twice.
//
// A run may be given a configuration (WithConfig): the values of the
// flow's config block, which expressions read as config.NAME; those the
// flow marks secret are never checkpointed, so a Resume is given them
// again. A run that reaches an interrupt node pauses with its questions
// (Result.Interrupt.Asks); a Resume WithAnswers goes on.
//
// A subflow node runs another flow as one step, on a thread of its own
// named by ChildThread(thread, ns) (ns is NODE:SEQ, as the child's events
// carry it): read it, fork it and time-travel in it as in any thread. A
// map node runs a node once per item of a list, folding the items' writes
// in item order; a run resumed after a crash runs only the unfinished
// items.
//
// Runs are traced by a runtime opened WithTracer: package runtime/telemetry
// builds an OpenTelemetry tracer, from the standard OTEL_ environment
// variables with telemetry.FromEnv.
//
// A node's attempt that outlasts its timeout, or its run's cancellation,
// is given up: the run waits for it a grace (WithGrace) and then goes on
// without it, and nothing it does afterwards reaches the run (Late counts
// it). A run ends when Run returns; no event follows.
//
// # Threads and time travel
//
// State, StateAt and History read a thread; Fork starts a new thread from
// any checkpoint of another; Update writes values as if a node had written
// them (a person correcting a thread); Prune folds old checkpoints away.
package trellis
