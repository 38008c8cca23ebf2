// Package cli is the trellis command line. It holds no logic of its own
// beyond argument handling and printing: loading, validating and running
// flows go through package trellis, the same functions any program that
// embeds Trellis calls. The node kinds are injected by the caller.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/nodes/tools/mcptool"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
)

// Env is what a command runs with.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Registry       kind.Registry
	// Offline is the registry flow tests use: the same kinds with no
	// model configured (nil: Registry).
	Offline kind.Registry
	// WithModel returns the same kinds with the llm kind on provider, for
	// flow tests that record or replay a cassette (nil: cassettes are not
	// supported).
	WithModel func(provider *llm.Provider) kind.Registry
}

type command struct {
	name    string
	usage   string
	summary string
	run     func(ctx context.Context, env *Env, args []string) int
}

var commands []*command

func init() {
	commands = []*command{
		{"validate", "validate [--format text|json|github|sarif] [--strict] [--max-warnings N] [FILE|DIR ...]", "Check flow files and report every problem with file:line:col", cmdValidate},
		{"graph", "graph FLOW [--format mermaid|dot|json]", "Draw a flow's graph", cmdGraph},
		{"run", "run FLOW [--with FILE] [--input k=v ...] [--input-file FILE] [--thread ID] [--trace] [--json]",
			"Run a flow: talk with a conversational flow in the terminal, or run once and print the flow's output (its final state without one, or with --json)", cmdRun},
		{"test", "test [--run TEXT] [-v] [--model | --record] [FILE|DIR ...] | test --from-thread THREAD [--out FILE] [--replace] [--store ADDR] FLOW",
			"Run flow tests (*.test.yaml): scripted node outputs, assertions on path, visits and state; model replies recorded once (--record) replay offline from x.cassette.yaml", cmdTest},
		{"eval", "eval [--repeat N] [--against REV] [--model NAME] [--concurrency N] [--run TEXT] [--format text|json|junit|github|markdown] [--report FORMAT=FILE ...] [--record] DATASET|DIR ... | eval add --from-thread THREAD [--name NAME] [--flow FLOW] [--store ADDR] DATASET",
			"Judge a flow on datasets of cases (*.eval.yaml): assertions, paths, scores with thresholds and rubric judges; pass rates over repeats, a comparison with another version (--against), reports for CI; a thread made into a case (eval add)", cmdEval},
		{"prompt", "prompt render FLOW NODE [--with FILE | --thread ID [--store ADDR]] [--input k=v ...] [--json]",
			"Show exactly what a node would send to the model for a given state", cmdPrompt},
		{"dev", "dev model-server [--addr HOST:PORT] [--script FILE] [--key KEY] | dev mcp-server [--addr HOST:PORT] [--log FILE] | dev loadtest [--threads N] [--turns T] [--store ADDR] [--prune-beside N [--window D] [--rounds N]] | dev sbom [--name N] [--deb PKG ...] BINARY",
			"Serve an OpenAI-compatible test model (its replies may call tools) or an MCP server of sample tools for demos and tests; load-test trellis serve with the model; write the SPDX SBOM of a built trellis (its Go modules) and the Debian packages beside it in an image", cmdDev},
		{"mcp", "mcp pin FLOW ...", "List the tools of each MCP server a flow's tools block names and write them to its pinned copy (FLOW.ENTRY.mcp.json), which validate reads when the server does not answer", cmdMCP},
		{"threads", "threads [--store ADDR] [--limit N] | threads migrate --to VERSION [--set FIELD=EXPR ...] [--drop FIELD ...] [--dry-run] TENANT/ID ... [--store ADDR]",
			"List threads, most recently updated first; move threads onto another version of their flow (recorded in their history): a served thread is TENANT/ID, as trellis threads lists it (a thread of trellis run has no tenant: its ID alone)", cmdThreads},
		{"history", "history THREAD [--store ADDR] [--limit N] [--before SEQ] [--source S] [--run ID] [--node NAME]", "List a thread's checkpoints, newest first", cmdHistory},
		{"state", "state THREAD [--store ADDR] [--at SEQ]", "Print a thread's state, now or at a checkpoint", cmdState},
		{"fork", "fork THREAD --at SEQ --to NEW [--store ADDR]", "Start a new thread from a thread's checkpoint", cmdFork},
		{"replay", "replay FLOW THREAD --at SEQ --to NEW [--model] [--trace] [--store ADDR]",
			"Re-run a thread from a checkpoint on a new thread: the nodes that were next there run, told the model's replies the thread was told (--model asks the model again)", cmdReplay},
		{"update", "update FLOW THREAD --as NODE --set k=v ... [--set-file FILE] [--at SEQ] [--store ADDR]",
			"Correct a thread as if NODE had written the values, at its newest checkpoint or an older one (a branch); an unfinished run there resumes over the edit, and at a finished one what NODE's edges trigger is next (run --resume runs it)", cmdUpdate},
		{"delete", "delete THREAD ... [--store ADDR]",
			"Delete threads with all of their data: checkpoints, child flows' threads, and a served thread's record, runs, events and voice sessions", cmdDelete},
		{"abandon", "abandon THREAD [--store ADDR]", "Give up a thread's unfinished run (recorded in its history) so it takes new input", cmdAbandon},
		{"prune", "prune [THREAD --keep N] [--idle DURATION] [--events DURATION [--tokens merge|drop]] [--vacuum] [--share F] [--store ADDR]",
			"Fold old checkpoints of a thread into a base; delete idle threads with all of their data; compact old runs' events; return a SQLite file's free space", cmdPrune},
		{"migrate", "migrate [--store ADDR]", "Apply the store's database migrations", cmdMigrate},
		{"serve", "serve [--flows DIR] [--store ADDR] [--addr HOST:PORT] [--retain-idle DURATION] [--retain-events DURATION] [--webhook-allow LIST] [--webhook FLOW=URL] [--schedules-per-tenant N] [--schedule-min-interval D] [--promote] [--body-timeout D] [--header-timeout D]",
			"Serve the flows as an HTTP API (schemas/openapi.yaml), with the studio at /studio; delete idle threads and compact old events as --retain-* say; post runs' ends to webhooks where --webhook-allow permits; start the runs of schedules", cmdServe},
		{"studio", "studio [FLOWS_DIR] [--store ADDR] [--addr HOST:PORT] [--tenant T] [--no-open]",
			"Design flows in the browser: serve the flows on loopback and open the studio (graph, editor, runs, history) signed in", cmdStudio},
		{"voice-agent", "voice-agent [--api URL] [--capacity N] [--speech-url URL] [--metrics-addr HOST:PORT]",
			"Voice conversational flows in LiveKit rooms: a LiveKit agent that hears the caller, runs turns through the API and speaks the replies", cmdVoiceAgent},
		{"keys", "keys create --tenant T [--admin] [--name N] [--from-env VAR] | keys generate | keys list [--tenant T] | keys revoke ID  [--store ADDR]",
			"Manage the API keys of trellis serve: make one (printed once), or record one kept in a secret (--from-env; keys generate prints a new one, recorded nowhere)", cmdKeys},
		{"schedules", "schedules create (--flow F | --thread T) --cron EXPR [--zone Z] [--input JSON] [--missed skip|run_once] [--grace D] [--webhook URL] [--id ID] | schedules list [--thread T] | schedules get|ticks|pause|resume|delete ID  [--api URL]",
			"Manage the cron schedules of trellis serve through its API (key: TRELLIS_API_KEY): each tick starts a run on a thread or on a new thread", cmdSchedules},
		{"flows", "flows list | flows versions NAME | flows promote NAME VERSION  [--api URL]",
			"Read a server's flows and their versions through its API (key: TRELLIS_API_KEY), and promote a version: new threads start on it on every server sharing the store (an admin key)", cmdFlows},
		{"sandbox", "sandbox check | sandbox run FILE [--language L] [--tests FILE] [--stdin FILE] [--wall-time D]",
			"Report the code sandbox configured by TRELLIS_SANDBOX and run a trivial program in it, or run a file of code", cmdSandbox},
		{"diff", "diff OLD NEW [--format text|github|mermaid|json]",
			"Compare two versions of a flow (files, or REV:FILE at a git revision) by meaning: nodes, edges, conditions, state fields, reducers, prompts, limits; exit 1 when they differ", cmdDiff},
		{"schema", "schema", "Print the JSON Schema of the flow format", cmdSchema},
		{"init", "init [--template linear|router|fanout|loop|chat] FLOW [DIR]", "Scaffold a flow from a template, with a passing test", cmdInit},
		{"explain", "explain [CODE]", "Explain a diagnostic code: what it protects against, a failing example and its fix, how to accept a warning", cmdExplain},
	}
}

// Main runs the command line and returns the process exit code. What it
// prints is safe for a terminal (see terminal).
func Main(args []string, env *Env) int {
	safe := *env
	safe.Stdout, safe.Stderr = &terminal{w: env.Stdout}, &terminal{w: env.Stderr}
	env = &safe
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.Stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	i := slices.IndexFunc(commands, func(c *command) bool { return c.name == args[0] })
	if i < 0 {
		fmt.Fprintf(env.Stderr, "trellis: unknown command %q\n\n", args[0])
		usage(env.Stderr)
		return exitUsage
	}
	// schemas found valid are remembered in the user's cache, so a later
	// command compiling them again (unchanged) skips their metaschema check
	if dir, err := os.UserCacheDir(); err == nil && os.Getenv("TRELLIS_SCHEMA_CACHE") != "off" {
		schema.RememberValid(filepath.Join(dir, "trellis", "valid-schemas"))
	}
	// SIGINT, SIGTERM and SIGHUP end a command (serve reloads its flows
	// on SIGHUP instead): its runs stop, and the process's sandbox, if a
	// flow made it, is closed with whatever it still runs and its warm
	// containers, as it is whenever the command ends
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if args[0] != "serve" {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	defer mcptool.CloseSessions()
	defer func() {
		if err := sandbox.CloseEnv(); err != nil {
			fmt.Fprintf(env.Stderr, "trellis %s: closing the sandbox: %v\n", args[0], err)
		}
	}()
	return commands[i].run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "trellis runs declarative graph flows written in YAML.")
	fmt.Fprintln(w, "\nUsage:")
	for _, c := range commands {
		fmt.Fprintf(w, "  trellis %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'trellis COMMAND --help' for a command's options.")
	fmt.Fprintln(w, "\n"+exitCodes)
}

// flags builds a command's flag set with its help text.
func flags(env *Env, name string) *flag.FlagSet {
	i := slices.IndexFunc(commands, func(c *command) bool { return c.name == name })
	c := commands[i]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "Usage: trellis %s\n\n%s.\n", c.usage, c.summary)
		if hasFlags(fs) {
			fmt.Fprintln(env.Stderr, "\nOptions:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parse parses flags that may be interleaved with positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0, false
			}
			return nil, 2, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// multi is a repeatable string flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
