package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/trellisflow/trellis"
)

// cmdThreadsMigrate moves threads onto another version of their flow, as
// POST /v1/threads/{id}/migrate does: a thread of a server's tenant is
// named TENANT/ID, as trellis threads lists it.
func cmdThreadsMigrate(ctx context.Context, env *Env, args []string) int {
	const name = "threads migrate"
	var to *string
	var dry *bool
	var sets, drops multi
	rt, pos, code := openStore(ctx, env, "threads", args, func(fs *flag.FlagSet) {
		to = fs.String("to", "", "the version to move the threads to (GET /v1/flows/NAME/versions lists a flow's versions)")
		fs.Var(&sets, "set", "a migration: FIELD=EXPR, the field's new value computed from the thread's state (state.NAME) as its version has it (repeatable)")
		fs.Var(&drops, "drop", "a field the new version no longer has, to clear (repeatable)")
		dry = fs.Bool("dry-run", false, "classify the change and check the migration only; move nothing")
	})
	if rt == nil {
		return code
	}
	defer rt.Close()
	if *to == "" || len(pos) == 0 {
		return fail(env, name, usagef("want --to VERSION and the threads to move: TENANT/ID for a served thread, as trellis threads lists it (ID alone for a thread of trellis run)"))
	}
	m := trellis.Migration{Drop: drops}
	for _, s := range sets {
		field, expr, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(field) == "" || strings.TrimSpace(expr) == "" {
			return fail(env, name, usagef("--set %q: want FIELD=EXPR", s))
		}
		if m.Set == nil {
			m.Set = map[string]string{}
		}
		m.Set[strings.TrimSpace(field)] = expr
	}
	vs, err := trellis.NewVersions(rt.Store(), trellis.WithKinds(env.Registry))
	if err != nil {
		return fail(env, name, err)
	}
	for _, id := range pos {
		tenant := ""
		if t, _, ok := strings.Cut(id, "/"); ok {
			tenant = t
		}
		res, err := vs.MoveThread(ctx, rt, tenant, id, *to, m, *dry)
		var me *trellis.MoveError
		if errors.As(err, &me) {
			fmt.Fprintf(env.Stderr, "trellis %s: %s cannot move from version %s to %s:\n", name, id, me.From, me.To)
			for _, b := range me.Breaking {
				fmt.Fprintf(env.Stderr, "  breaking: %s\n", b.Reason)
			}
			for _, p := range me.Problems {
				fmt.Fprintf(env.Stderr, "  %s\n", p)
			}
			if len(me.Breaking) > 0 {
				fmt.Fprintln(env.Stderr, "give each breaking field a value with --set FIELD=EXPR (or --drop FIELD for a removed one)")
			}
			return exitRuntime
		}
		if err != nil {
			return fail(env, name, missing(err, id, 0))
		}
		switch {
		case res.From == res.To:
			fmt.Fprintf(env.Stdout, "%s is on version %s already\n", id, res.To)
		case res.Moved:
			fmt.Fprintf(env.Stdout, "%s moved from version %s to %s (checkpoint %d)\n", id, res.From, res.To, res.Checkpoint)
		default:
			fmt.Fprintf(env.Stdout, "%s can move from version %s to %s\n", id, res.From, res.To)
		}
		for _, e := range res.Effects {
			verdict := "compatible"
			if e.Breaking {
				verdict = "breaking, migrated"
			}
			fmt.Fprintf(env.Stdout, "  %s: %s\n", verdict, e.Reason)
		}
	}
	return 0
}
