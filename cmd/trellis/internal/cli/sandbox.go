package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
	"github.com/trellisflow/trellis/runtime/schema"
)

// cmdSandbox reports the configured sandbox backend (check), or runs a
// file of code in it (run).
func cmdSandbox(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "sandbox")
	lang := fs.String("language", "python", "run: the language ("+fmt.Sprint(sandbox.BuiltinNames())+")")
	tests := fs.String("tests", "", "run: a YAML or JSON file holding the list of tests")
	stdin := fs.String("stdin", "", "run: a file to run the program on")
	wall := fs.Duration("wall-time", 0, "run: the wall-time limit (default 10s)")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) == 0 || pos[0] != "check" && pos[0] != "run" || pos[0] == "check" && len(pos) != 1 || pos[0] == "run" && len(pos) != 2 {
		return fail(env, "sandbox", usagef("want check, or run FILE"))
	}
	// what to run is read first: a wrong command line is told as such,
	// whatever the sandbox
	var l *sandbox.Language
	var sub sandbox.Submission
	if pos[0] == "run" {
		var known bool
		if l, known = sandbox.Builtin()[*lang]; !known {
			return fail(env, "sandbox", usagef("unknown language %q (%v)", *lang, sandbox.BuiltinNames()))
		}
		src, err := os.ReadFile(pos[1])
		if err != nil {
			return fail(env, "sandbox", &usageError{err})
		}
		sub = sandbox.Submission{Code: string(src), Limits: sandbox.Limits{Wall: *wall}}
		if *tests != "" {
			v, err := schema.ReadFile(*tests)
			if err != nil {
				return fail(env, "sandbox", &usageError{err})
			}
			if sub.Tests, err = sandbox.Tests(v); err != nil {
				return fail(env, "sandbox", usagef("%s: %w", *tests, err))
			}
		}
		if *stdin != "" {
			b, err := os.ReadFile(*stdin)
			if err != nil {
				return fail(env, "sandbox", &usageError{err})
			}
			s := string(b)
			sub.Stdin = &s
		}
	}
	pool, err := sandbox.FromEnv()
	if err != nil {
		return fail(env, "sandbox", err)
	}
	if pool == nil {
		fmt.Fprintln(env.Stdout, "no sandbox: set TRELLIS_SANDBOX=docker (with DOCKER_HOST) or local (with bubblewrap installed);")
		fmt.Fprintln(env.Stdout, "sandbox nodes write a not_run result and are marked degraded")
		return 1
	}
	defer pool.Close()
	if pos[0] == "check" {
		c, err := pool.Backend().Check(ctx)
		if c != nil {
			fmt.Fprintf(env.Stdout, "backend:   %s\nisolation: %s\n", c.Backend, c.Isolation)
			for _, d := range c.Details {
				fmt.Fprintf(env.Stdout, "           %s\n", d)
			}
			for _, w := range c.Warnings {
				fmt.Fprintf(env.Stdout, "warning:   %s\n", w)
			}
		}
		if err != nil {
			return fail(env, "sandbox", err)
		}
		// a trivial program in each language, end to end
		for _, name := range sandbox.BuiltinNames() {
			start := time.Now()
			r, err := sandbox.Execute(ctx, pool, sandbox.Builtin()[name], sandbox.Submission{Code: map[string]string{
				"python": "print('ok')\n", "javascript": "console.log('ok')\n"}[name]})
			switch {
			case err != nil:
				return fail(env, "sandbox", fmt.Errorf("%s: %w", name, err))
			case r.Status != sandbox.StatusOK || r.Stdout != "ok\n":
				return fail(env, "sandbox", fmt.Errorf("%s: a trivial program gave %s: %s %s", name, r.Status, r.Error, r.Stderr))
			}
			fmt.Fprintf(env.Stdout, "%-10s ok in %v\n", name, time.Since(start).Round(time.Millisecond))
		}
		return 0
	}
	r, err := sandbox.Execute(ctx, pool, l, sub)
	if err != nil {
		return fail(env, "sandbox", err)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	fmt.Fprintln(env.Stdout, string(b))
	if r.Status == sandbox.StatusOK || r.Status == sandbox.StatusPassed {
		return 0
	}
	return 1
}
