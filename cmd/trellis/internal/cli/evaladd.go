package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/trellisflow/trellis/runtime/eval"
)

// cmdEvalAdd makes a case of a thread and adds it to a dataset, with the
// model replies its runs were told in the dataset's cassette.
func cmdEvalAdd(ctx context.Context, env *Env, args []string) int {
	const name = "eval add"
	fs := flags(env, "eval")
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "Usage: trellis eval add --from-thread THREAD [--name NAME] [--flow FLOW] [--store ADDR] DATASET\n\n"+
			"Make a case of a thread (its initial values, the messages and input of its runs, the path each took) and add it to a dataset,\n"+
			"with the model replies its runs were told in the dataset's cassette, so that it replays offline.\n\nOptions:\n")
		fs.PrintDefaults()
	}
	thread := fs.String("from-thread", "", "the thread to make a case of (of the store --store names)")
	caseName := fs.String("name", "", "the case's name (default: thread THREAD)")
	flowPath := fs.String("flow", "", "the thread's flow, for a dataset that does not exist yet (a new dataset evaluates it)")
	storeAddr := storeFlag(fs)
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if *thread == "" || len(pos) != 1 {
		return fail(env, name, usagef("want --from-thread THREAD and the DATASET to add the case to"))
	}
	path := pos[0]
	var src []byte
	var flowFile, flowRef string
	switch b, err := os.ReadFile(path); {
	case err == nil:
		ds, err := eval.Load(path)
		if err != nil {
			printLoadError(env, path, "the dataset is not valid", err)
			return exitFailed
		}
		src, flowFile = b, ds.FlowPath()
		if *flowPath != "" {
			return fail(env, name, usagef("--flow: %s evaluates %s already", path, ds.Flow))
		}
	case errors.Is(err, os.ErrNotExist):
		if *flowPath == "" {
			return fail(env, name, usagef("%s does not exist: --flow FLOW names the flow a new dataset evaluates", path))
		}
		absFlow, err1 := filepath.Abs(*flowPath)
		absDir, err2 := filepath.Abs(filepath.Dir(path))
		if err := errors.Join(err1, err2); err != nil {
			return fail(env, name, err)
		}
		rel, err := filepath.Rel(absDir, absFlow)
		if err != nil {
			return fail(env, name, err)
		}
		flowFile, flowRef = *flowPath, filepath.ToSlash(rel)
	default:
		return fail(env, name, usagef("%v", err))
	}
	kinds := env.Offline
	if kinds == nil {
		kinds = env.Registry
	}
	f, code := loadWith(env, flowFile, kinds)
	if f == nil {
		return code
	}
	if *caseName == "" {
		*caseName = "thread " + *thread
	}
	rt, err := openRuntime(ctx, *storeAddr)
	if err != nil {
		return fail(env, name, err)
	}
	defer rt.Close()
	made, err := eval.AddCase(ctx, rt.Store(), f.Graph(), *thread, *caseName, path, src, flowRef)
	if errors.Is(err, eval.ErrCaseExists) {
		err = usagef("%v", err)
	}
	if err != nil {
		return fail(env, name, missing(err, *thread, 0))
	}
	if err := made.Save(path); err != nil {
		return fail(env, name, err)
	}
	fmt.Fprintf(env.Stderr, "added case %q to %s", made.Name, path)
	if len(made.Entries) > 0 {
		fmt.Fprintf(env.Stderr, ", and the %s its runs were told to %s", plural(len(made.Entries), "model reply"), eval.CassettePath(path))
	}
	fmt.Fprintln(env.Stderr)
	return exitOK
}
