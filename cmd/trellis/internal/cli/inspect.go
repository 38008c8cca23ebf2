package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

// sources are the checkpoint sources history filters by.
var sources = []trellis.Source{trellis.SourceCreate, trellis.SourceFork, trellis.SourceInput, trellis.SourceStep,
	trellis.SourceRun, trellis.SourceUpdate, trellis.SourceBase, trellis.SourceAbandon, trellis.SourceMigrate}

func sourceNames() string {
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func storeFlag(fs *flag.FlagSet) *string {
	return fs.String("store", trellis.DefaultStore, "checkpoint store: memory, sqlite:PATH or postgres://...")
}

// openStore parses a command's flags and opens a runtime over its store.
func openStore(ctx context.Context, env *Env, name string, args []string, setup func(*flag.FlagSet)) (*trellis.Runtime, []string, int) {
	fs := flags(env, name)
	addr := storeFlag(fs)
	if setup != nil {
		setup(fs)
	}
	pos, code, ok := parse(fs, args)
	if !ok {
		return nil, nil, code
	}
	rt, err := openRuntime(ctx, *addr)
	if err != nil {
		return nil, nil, fail(env, name, err)
	}
	return rt, pos, 0
}

func fail(env *Env, name string, err error) int {
	fmt.Fprintf(env.Stderr, "trellis %s: %v\n", name, err)
	return exitCode(err)
}

// missing names what the store did not find: the thread, or a checkpoint
// of it (at > 0); other errors pass unchanged.
func missing(err error, thread string, at uint64) error {
	switch {
	case !errors.Is(err, trellis.ErrNotFound):
		return err
	case at > 0:
		return fmt.Errorf("thread %q has no checkpoint %d (trellis history %s lists them)", thread, at, thread)
	}
	return fmt.Errorf("no thread %q in this store (trellis threads lists them)", thread)
}

func printJSON(env *Env, v any) {
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func cmdThreads(ctx context.Context, env *Env, args []string) int {
	if len(args) > 0 && args[0] == "migrate" {
		return cmdThreadsMigrate(ctx, env, args[1:])
	}
	var limit *int
	st, _, code := openStore(ctx, env, "threads", args, func(fs *flag.FlagSet) { limit = fs.Int("limit", 50, "threads to list") })
	if st == nil {
		return code
	}
	defer st.Close()
	list, err := st.Threads(ctx, trellis.ThreadOptions{Limit: *limit})
	if err != nil {
		return fail(env, "threads", err)
	}
	for _, t := range list {
		fmt.Fprintf(env.Stdout, "%s\tcheckpoint %d\tupdated %s\n", t.ID, t.Head, t.Updated.Local().Format(time.DateTime))
	}
	return 0
}

func cmdHistory(ctx context.Context, env *Env, args []string) int {
	var limit *int
	var before *uint64
	var source, run, node *string
	st, pos, code := openStore(ctx, env, "history", args, func(fs *flag.FlagSet) {
		limit = fs.Int("limit", 20, "checkpoints to list")
		before = fs.Uint64("before", 0, "list checkpoints older than this one")
		source = fs.String("source", "", "only checkpoints of this source: "+sourceNames())
		run = fs.String("run", "", "only checkpoints of this run")
		node = fs.String("node", "", "only checkpoints this node wrote")
	})
	if st == nil {
		return code
	}
	defer st.Close()
	if len(pos) != 1 {
		return fail(env, "history", usagef("want one THREAD"))
	}
	if *source != "" && !slices.Contains(sources, trellis.Source(*source)) {
		return fail(env, "history", usagef("unknown --source %q (%s)", *source, sourceNames()))
	}
	cps, err := st.History(ctx, pos[0], trellis.HistoryOptions{Limit: *limit, Before: *before, Source: trellis.Source(*source), Run: *run, Node: *node})
	if err != nil {
		return fail(env, "history", missing(err, pos[0], 0))
	}
	for _, cp := range cps {
		var nodes, fields []string
		for _, w := range cp.Writers {
			nodes = append(nodes, w.Node)
		}
		var removed []string
		for _, w := range cp.Writes {
			if w.Removed {
				removed = append(removed, w.Field)
				continue
			}
			fields = append(fields, w.Field)
		}
		fmt.Fprintf(env.Stdout, "%d\t%s\t%-6s step %-3d nodes [%s] wrote [%s]", cp.Seq, cp.Time.Local().Format(time.DateTime),
			cp.Source, cp.Step, strings.Join(nodes, ", "), strings.Join(fields, ", "))
		if len(removed) > 0 {
			fmt.Fprintf(env.Stdout, " removed [%s]", strings.Join(removed, ", "))
		}
		if cp.Source == trellis.SourceMigrate {
			from, _ := cp.Config["from_version"].(string)
			to, _ := cp.Config["to_version"].(string)
			fmt.Fprintf(env.Stdout, " moved from version %s to %s", from, to)
		}
		if len(cp.Next) > 0 {
			fmt.Fprintf(env.Stdout, " next [%s]", strings.Join(cp.Next, ", "))
		}
		if from, seq, ok := store.ForkedFrom(cp); ok {
			fmt.Fprintf(env.Stdout, " forked from %s at %d", from, seq)
		}
		if cp.Base != 0 {
			fmt.Fprintf(env.Stdout, " branch of %d", cp.Base)
		}
		if n := len(cp.Replies); n > 0 && cp.Source != trellis.SourceFork {
			fmt.Fprintf(env.Stdout, " replies %d", n)
		}
		fmt.Fprintln(env.Stdout)
	}
	return 0
}

func cmdState(ctx context.Context, env *Env, args []string) int {
	var at *uint64
	st, pos, code := openStore(ctx, env, "state", args, func(fs *flag.FlagSet) { at = fs.Uint64("at", 0, "checkpoint (default: the newest)") })
	if st == nil {
		return code
	}
	defer st.Close()
	if len(pos) != 1 {
		return fail(env, "state", usagef("want one THREAD"))
	}
	var snap *trellis.Snapshot
	var err error
	if *at > 0 {
		snap, err = st.StateAt(ctx, pos[0], *at)
	} else {
		snap, err = st.State(ctx, pos[0])
	}
	if err != nil {
		return fail(env, "state", missing(err, pos[0], *at))
	}
	printJSON(env, snap.Values)
	return 0
}

func cmdFork(ctx context.Context, env *Env, args []string) int {
	var at *uint64
	var to *string
	st, pos, code := openStore(ctx, env, "fork", args, func(fs *flag.FlagSet) {
		at = fs.Uint64("at", 0, "checkpoint to fork from")
		to = fs.String("to", "", "id of the new thread")
	})
	if st == nil {
		return code
	}
	defer st.Close()
	if len(pos) != 1 || *at == 0 || *to == "" {
		return fail(env, "fork", usagef("want THREAD --at SEQ --to NEW"))
	}
	if _, err := st.Fork(ctx, pos[0], *at, *to); err != nil {
		return fail(env, "fork", missing(err, pos[0], *at))
	}
	fmt.Fprintf(env.Stdout, "%s forked from %s at checkpoint %d\n", *to, pos[0], *at)
	return 0
}

// cmdReplay re-runs a thread from one of its checkpoints on a new thread,
// told the model's replies the thread was told.
func cmdReplay(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "replay")
	at := fs.Uint64("at", 0, "the checkpoint to replay from")
	to := fs.String("to", "", "id of the new thread")
	useModel := fs.Bool("model", false, "ask the model again instead of telling the nodes what it told the thread")
	trace := fs.Bool("trace", false, "print the run's events")
	addr := storeFlag(fs)
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 || *at == 0 || *to == "" {
		return fail(env, "replay", usagef("want FLOW THREAD --at SEQ --to NEW"))
	}
	f, code := load(env, pos[0])
	if f == nil {
		return code
	}
	rt, err := openRuntime(ctx, *addr)
	if err != nil {
		return fail(env, "replay", err)
	}
	defer rt.Close()
	var opts []trellis.RunOption
	if *trace {
		opts = append(opts, trellis.WithObserver(TraceTo(env.Stderr)))
	}
	var snap *trellis.Snapshot
	var res *trellis.Result
	if *useModel {
		if snap, err = rt.Fork(ctx, pos[1], *at, *to); err == nil && len(snap.Next) > 0 {
			res, err = rt.Resume(ctx, f, *to, opts...)
		}
	} else {
		snap, res, err = rt.Replay(ctx, f, pos[1], *at, *to, opts...)
	}
	if snap == nil {
		return fail(env, "replay", missing(err, pos[1], *at))
	}
	if err != nil {
		return fail(env, "replay", err)
	}
	if res == nil {
		fmt.Fprintf(env.Stderr, "%s: forked from %s at checkpoint %d, which left nothing to run: a run with input goes on from it\n", *to, pos[1], *at)
		printJSON(env, snap.Values)
		return 0
	}
	fmt.Fprintf(env.Stderr, "%s: replayed from %s at checkpoint %d in %d steps, now at checkpoint %d\n", *to, pos[1], *at, res.Steps-snap.Step, res.Checkpoint)
	if res.Interrupt != nil {
		fmt.Fprintf(env.Stderr, "%s: paused at [%s]: trellis run --resume goes on\n", *to, strings.Join(append(res.Interrupt.Before, res.Interrupt.After...), ", "))
	}
	printJSON(env, res.State)
	return 0
}

func cmdPrune(ctx context.Context, env *Env, args []string) int {
	var keep, batch *int
	var idle, events time.Duration
	var tokens *string
	var share *float64
	var vacuum *bool
	st, pos, code := openStore(ctx, env, "prune", args, func(fs *flag.FlagSet) {
		keep = fs.Int("keep", 0, "checkpoints of THREAD to keep")
		batch = fs.Int("batch", trellis.DefaultPruneBatch, "checkpoints deleted per transaction")
		fs.Var(daysFlag(&idle), "idle", "delete the threads not written for this long, a `duration` such as 30d or 720h, each with all of its data")
		fs.Var(daysFlag(&events), "events", "compact the events of the runs that ended this long ago, a `duration` such as 2m or 1d: keep their node-level events, packed")
		tokens = fs.String("tokens", server.TokensMerge, "with --events, what becomes of the runs' tokens: merge (one event per node's attempt with its whole text) or drop")
		vacuum = fs.Bool("vacuum", false, "SQLite: rebuild the file so that its free space is returned, now and by every prune and sweep after (a file made before retention keeps it for reuse otherwise); it holds the file while it copies it")
		share = fs.Float64("share", 0.1, "with --idle and --events, the part of the time the prune may work: it rests the rest, in small batches, so that a server using the store keeps it (1: no rest)")
	})
	if st == nil {
		return code
	}
	defer st.Close()
	if *batch < 0 {
		return fail(env, "prune", usagef("--batch %d: want the checkpoints per transaction (0: %d)", *batch, trellis.DefaultPruneBatch))
	}
	if *share <= 0 || *share > 1 {
		return fail(env, "prune", usagef("--share %g: want the part of the time the prune may work, above 0 and at most 1", *share))
	}
	if *tokens != server.TokensMerge && *tokens != server.TokensDrop {
		return fail(env, "prune", usagef("--tokens %q: want %s or %s", *tokens, server.TokensMerge, server.TokensDrop))
	}
	switch {
	case len(pos) == 1 && *keep > 0:
		if _, err := st.State(ctx, pos[0]); err != nil {
			return fail(env, "prune", missing(err, pos[0], 0))
		}
		// progress at most once a second, and at the end
		var last time.Time
		progress := func(removed, total int) {
			if now := time.Now(); now.Sub(last) >= time.Second || removed == total {
				last = now
				fmt.Fprintf(env.Stderr, "%s: %d of %d older checkpoints removed\n", pos[0], removed, total)
			}
		}
		n, err := st.Prune(ctx, pos[0], trellis.PruneOptions{Keep: *keep, Batch: *batch, Progress: progress})
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintf(env.Stderr, "trellis prune: stopped after removing %d checkpoints; every state still listed is intact, and running the command again finishes\n", n)
				return exitRuntime
			}
			return fail(env, "prune", missing(err, pos[0], 0))
		}
		fmt.Fprintf(env.Stdout, "%s: folded %d checkpoints into a base\n", pos[0], n)
	case len(pos) == 0 && (idle > 0 || events > 0 || *vacuum):
		return pruneStore(ctx, env, st, idle, events, *tokens, *vacuum, store.Pacer{Share: *share, MaxRest: 10 * time.Second})
	default:
		return fail(env, "prune", usagef("want THREAD --keep N (N at least 1), or --idle DURATION, --events DURATION or --vacuum"))
	}
	return 0
}

func cmdMigrate(ctx context.Context, env *Env, args []string) int {
	st, _, code := openStore(ctx, env, "migrate", args, nil)
	if st == nil {
		return code
	}
	defer st.Close()
	fmt.Fprintln(env.Stdout, "migrations applied")
	return 0
}

// cmdUpdate writes values to a thread as if a node had written them: a
// correction between runs, recorded as a checkpoint with source "update".
func cmdUpdate(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "update")
	var sets multi
	fs.Var(&sets, "set", "a field to write: name=value (repeatable; value parsed as YAML)")
	setFile := fs.String("set-file", "", "read the fields to write from a YAML or JSON file")
	as := fs.String("as", "", "the node the update is written as (its declared writes and reducers apply)")
	at := fs.Uint64("at", 0, "the checkpoint to update at (default: the newest); an older one branches from there, and its unfinished run, if any, resumes over the edit")
	addr := storeFlag(fs)
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 || *as == "" || len(sets) == 0 && *setFile == "" {
		return fail(env, "update", usagef("want FLOW THREAD --as NODE and --set name=value or --set-file FILE"))
	}
	g, code := load(env, pos[0])
	if g == nil {
		return code
	}
	values, err := ParseInputs(g, "--set", sets, *setFile)
	if err != nil {
		return fail(env, "update", err)
	}
	rt, err := openRuntime(ctx, *addr)
	if err != nil {
		return fail(env, "update", err)
	}
	defer rt.Close()
	snap, err := rt.UpdateAt(ctx, g, pos[1], *at, *as, values)
	if err != nil {
		return fail(env, "update", missing(err, pos[1], *at))
	}
	switch {
	case *at != 0 && *at != snap.Seq-1:
		fmt.Fprintf(env.Stderr, "%s: checkpoint %d written as %s, a branch of checkpoint %d\n", pos[1], snap.Seq, *as, *at)
	default:
		fmt.Fprintf(env.Stderr, "%s: checkpoint %d written as %s\n", pos[1], snap.Seq, *as)
	}
	if len(snap.Next) > 0 {
		fmt.Fprintf(env.Stderr, "%s: its run goes on with [%s]: trellis run --resume\n", pos[1], strings.Join(snap.Next, ", "))
	}
	printJSON(env, snap.Values)
	return 0
}

func cmdDelete(ctx context.Context, env *Env, args []string) int {
	st, pos, code := openStore(ctx, env, "delete", args, nil)
	if st == nil {
		return code
	}
	defer st.Close()
	if len(pos) == 0 {
		return fail(env, "delete", usagef("want THREAD ..."))
	}
	for _, id := range pos {
		if err := st.Delete(ctx, id); err != nil {
			return fail(env, "delete", missing(err, id, 0))
		}
		fmt.Fprintf(env.Stdout, "deleted %s\n", id)
	}
	return 0
}

func cmdAbandon(ctx context.Context, env *Env, args []string) int {
	rt, pos, code := openStore(ctx, env, "abandon", args, nil)
	if rt == nil {
		return code
	}
	defer rt.Close()
	if len(pos) != 1 {
		return fail(env, "abandon", usagef("want one THREAD"))
	}
	before, err := rt.State(ctx, pos[0])
	if err != nil {
		return fail(env, "abandon", missing(err, pos[0], 0))
	}
	snap, err := rt.Abandon(ctx, pos[0])
	if err != nil {
		return fail(env, "abandon", err)
	}
	if snap.Seq == before.Seq {
		fmt.Fprintf(env.Stdout, "%s has no unfinished run\n", pos[0])
		return 0
	}
	fmt.Fprintf(env.Stdout, "%s: the unfinished run was abandoned at checkpoint %d (it ran up to step %d)\n", pos[0], snap.Seq, snap.Step)
	return 0
}
