package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

// pruneStore deletes the idle threads, compacts the old runs' events and
// returns a SQLite file's free space, as a server's retention sweep does,
// reporting its progress at most once a second.
func pruneStore(ctx context.Context, env *Env, rt *trellis.Runtime, idle, events time.Duration, tokens string, vacuum bool, pace store.Pacer) int {
	st := rt.Store()
	var last time.Time
	every := func(format string, args ...any) {
		if now := time.Now(); now.Sub(last) >= time.Second {
			last = now
			fmt.Fprintf(env.Stderr, format+"\n", args...)
		}
	}
	stopped := func(what string) int {
		fmt.Fprintf(env.Stderr, "trellis prune: stopped while %s; what is done stays done, and running the command again goes on\n", what)
		return exitRuntime
	}
	if vacuum {
		v, ok := st.(interface{ Vacuum(context.Context) error })
		if !ok {
			return fail(env, "prune", usagef("--vacuum is for SQLite: PostgreSQL's autovacuum returns the room of deleted rows for reuse"))
		}
		if err := v.Vacuum(ctx); err != nil {
			return fail(env, "prune", err)
		}
		fmt.Fprintln(env.Stdout, "rebuilt the database file: its free space is returned, and will be by every prune and sweep")
	}
	if idle > 0 {
		n := 0
		_, err := rt.PruneIdleThreads(ctx, trellis.IdleOptions{TTL: idle, Pace: pace.Rest, Deleted: func(string) {
			n++
			every("%d idle threads deleted so far", n)
		}})
		if err != nil {
			if ctx.Err() != nil {
				return stopped(fmt.Sprintf("deleting idle threads (%d deleted)", n))
			}
			return fail(env, "prune", err)
		}
		fmt.Fprintf(env.Stdout, "deleted %d idle threads\n", n)
	}
	if events > 0 {
		cat, err := store.CatalogOf(st)
		if err != nil {
			return fail(env, "prune", err)
		}
		var done server.PackBatch
		_, err = server.PackEvents(ctx, cat, time.Now().Add(-events), tokens, func(ctx context.Context, b server.PackBatch) error {
			done.Runs, done.Events, done.Kept = done.Runs+b.Runs, done.Events+b.Events, done.Kept+b.Kept
			every("the events of %d runs compacted so far", done.Runs)
			return pace.Rest(ctx, b.Took)
		})
		if err != nil {
			if ctx.Err() != nil {
				return stopped(fmt.Sprintf("compacting events (%d runs done)", done.Runs))
			}
			return fail(env, "prune", err)
		}
		fmt.Fprintf(env.Stdout, "compacted the events of %d runs: %d events, %d kept\n", done.Runs, done.Events, done.Kept)
	}
	if v, ok := st.(store.SpaceReturner); ok && (idle > 0 || events > 0) {
		pages := 0
		for {
			start := time.Now()
			n, left, err := v.ReturnSpace(ctx, 256)
			if err != nil {
				if ctx.Err() != nil {
					return stopped("returning free space")
				}
				return fail(env, "prune", err)
			}
			pages += n
			if n == 0 || left == 0 {
				break
			}
			if err := pace.Rest(ctx, time.Since(start)); err != nil {
				return stopped("returning free space")
			}
		}
		if pages > 0 {
			fmt.Fprintf(env.Stdout, "returned %d free pages of the database file\n", pages)
		}
	}
	return 0
}
