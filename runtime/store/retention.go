package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// IdleOptions says which threads PruneIdleThreads deletes, and how fast.
type IdleOptions struct {
	// TTL: the threads not written for this long are deleted.
	TTL time.Duration
	// Page is how many idle threads one listing reads (0: 100).
	Page int
	// Batch is how many threads a store that deletes several in one
	// request (IdlePruner) is given at once (0: 8); Pace is then called
	// after each batch. Other stores delete one thread at a time.
	Batch int
	// Pace, when set, is called after each thread with the time its
	// deletion took, and returns once the next may begin (see Pacer), or
	// with an error that stops the prune. On a store that runs one write
	// at a time (SQLite) that is the time the deletion held the store's
	// writer (see WithHold), not the time it waited for it behind the
	// runs' writes: the wait costs the runs nothing, and pacing by it
	// made the prune rest the longer the busier the store was.
	Pace func(ctx context.Context, took time.Duration) error
	// Deleted, when set, is told of each thread deleted.
	Deleted func(thread string)
	// Now is the sweep's present, from which TTL counts back (zero: the
	// time the sweep starts).
	Now time.Time
}

// PruneIdle deletes the threads not updated for ttl and returns how many
// (see PruneIdleThreads).
func PruneIdle(ctx context.Context, st Store, ttl time.Duration) (int, error) {
	return PruneIdleThreads(ctx, st, IdleOptions{TTL: ttl})
}

// PruneIdleThreads deletes the root threads not written for opts.TTL,
// each with everything the store keeps of it (see Store.Delete), one
// thread per transaction (or, on an IdlePruner, opts.Batch threads per
// request, each deleted whole or not at all), a page of them listed at
// a time, and returns how many it deleted. The threads of child flows go
// with their root, never on their own.
//
// It holds each thread's lease while it deletes it, as a run holds it
// while it runs: a thread a run holds is left, one written between the
// listing and the lease is not idle any more, and one with a queued or
// running run in the catalog is left too (Store.Delete refuses it).
func PruneIdleThreads(ctx context.Context, st Store, opts IdleOptions) (int, error) {
	sw := NewIdleSweep(st, opts)
	n := 0
	for {
		b, err := sw.Step(ctx)
		n += b.Deleted
		if err != nil {
			return n, err
		}
		if b.Batch {
			if opts.Pace != nil {
				if err := opts.Pace(ctx, b.Took); err != nil {
					return n, err
				}
			} else if err := ctx.Err(); err != nil {
				return n, err
			}
		}
		if !b.More {
			return n, nil
		}
	}
}

// IdleSweep deletes the threads not written for a time a batch at a
// time, as PruneIdleThreads does, for a caller that interleaves the
// batches with other work (a server's retention packs events between
// them). opts.Pace is not called: the caller paces Step.
type IdleSweep struct {
	st     Store
	opts   IdleOptions
	cutoff time.Time
	owner  string
	bp     IdlePruner
	batch  int
	page   int
	// idle is the listed page not yet deleted; after the last listed
	idle  []ThreadInfo
	after *ThreadInfo
	last  bool // the page listed was the last
}

// NewIdleSweep starts a sweep of the threads idle for opts.TTL as of
// opts.Now.
func NewIdleSweep(st Store, opts IdleOptions) *IdleSweep {
	var b [8]byte
	_, _ = rand.Read(b[:])
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	sw := &IdleSweep{st: st, opts: opts, cutoff: now.Add(-opts.TTL), owner: "prune of idle threads " + hex.EncodeToString(b[:]),
		batch: opts.Batch, page: opts.Page}
	if sw.page <= 0 {
		sw.page = 100
	}
	if sw.batch <= 0 {
		sw.batch = 8
	}
	if bp, ok := st.(IdlePruner); ok {
		sw.bp = bp
	} else {
		sw.batch = 1
	}
	return sw
}

// IdleBatch is what one Step of an IdleSweep did.
type IdleBatch struct {
	// Batch says whether it went through a batch of threads (none when
	// there were no more); Deleted is how many of them it deleted.
	Batch   bool
	Deleted int
	// Took is the time the batch took: on a store that runs one write at
	// a time, the time it held the store's writer (see WithHold).
	Took time.Duration
	// More says whether more may be left.
	More bool
}

// Step deletes the next batch of idle threads, listing the next page
// when it needs one.
func (sw *IdleSweep) Step(ctx context.Context) (IdleBatch, error) {
	start := time.Now()
	if len(sw.idle) == 0 {
		if sw.last {
			return IdleBatch{}, nil
		}
		idle, err := sw.st.Threads(ctx, ThreadOptions{IdleSince: sw.cutoff, Roots: true, Limit: sw.page, After: sw.after})
		if err != nil {
			return IdleBatch{More: true}, fmt.Errorf("list idle threads: %w", err)
		}
		sw.idle, sw.last = idle, len(idle) < sw.page
		if len(idle) == 0 {
			return IdleBatch{}, nil
		}
		sw.after = &idle[len(idle)-1]
	}
	part := sw.idle[:min(sw.batch, len(sw.idle))]
	var hold Hold
	var gone []string
	var err error
	if sw.bp != nil {
		ids := make([]string, len(part))
		for i, t := range part {
			ids[i] = t.ID
		}
		// in one order, so that two prunes never wait for each other's
		// threads in turn
		slices.Sort(ids)
		if gone, err = sw.bp.PruneIdle(WithHold(ctx, &hold), ids, sw.owner, sw.cutoff); err != nil {
			return IdleBatch{More: true}, fmt.Errorf("prune idle threads %q: %w", ids, err)
		}
	} else {
		ok, err := pruneIdle(WithHold(ctx, &hold), sw.st, part[0].ID, sw.owner, sw.cutoff)
		if err != nil {
			return IdleBatch{More: true}, err
		}
		if ok {
			gone = []string{part[0].ID}
		}
	}
	sw.idle = sw.idle[len(part):]
	if sw.opts.Deleted != nil {
		for _, id := range gone {
			sw.opts.Deleted(id)
		}
	}
	took, ok := hold.Held()
	if !ok {
		took = time.Since(start)
	}
	return IdleBatch{Batch: true, Deleted: len(gone), Took: took, More: len(sw.idle) > 0 || !sw.last}, nil
}

// Backlog is a store that counts the work a retention has left: the
// root threads not written since a time, and the ended runs whose events
// are not packed. The built-in stores implement it.
type Backlog interface {
	// IdleBacklog counts the root threads (no child flow's) not written
	// since cutoff.
	IdleBacklog(ctx context.Context, cutoff time.Time) (int, error)
	// PackBacklog counts the runs that ended before before and whose
	// events are not packed (those RunsToPack lists).
	PackBacklog(ctx context.Context, before time.Time) (int, error)
}

// IdlePruner is a store that deletes several idle threads in one
// request, which PruneIdleThreads then uses.
type IdlePruner interface {
	// PruneIdle deletes, of threads and in their order, those not written
	// since cutoff, each as Delete does and under its lease taken for
	// owner as Acquire takes it: a thread whose lease another holder has,
	// or with a queued or running run, is left. Each thread is deleted
	// whole or not at all. It returns the threads it deleted.
	PruneIdle(ctx context.Context, threads []string, owner string, cutoff time.Time) ([]string, error)
}

// pruneIdle deletes one thread under its lease if it is still idle.
func pruneIdle(ctx context.Context, st Store, thread, owner string, cutoff time.Time) (bool, error) {
	if err := st.Acquire(ctx, thread, owner, time.Minute); err != nil {
		if errors.Is(err, ErrLeased) {
			return false, nil
		}
		return false, fmt.Errorf("prune idle thread %q: %w", thread, err)
	}
	defer st.Release(context.WithoutCancel(ctx), thread, owner)
	// the newest checkpoint's time is the thread's last write
	last, err := st.History(ctx, thread, HistoryOptions{Limit: 1})
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("prune idle thread %q: %w", thread, err)
	}
	if len(last) == 0 || !last[0].Time.Before(cutoff) {
		return false, nil
	}
	if err := st.Delete(ctx, thread); err != nil {
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrBusy) {
			return false, nil
		}
		return false, fmt.Errorf("prune idle thread %q: %w", thread, err)
	}
	return true, nil
}

// Hold adds up the time a piece of work held a store's writer. A store
// that runs one write at a time (SQLite) adds to the Hold of a write's
// context the time from when the write has the writer to when it gives
// it up, leaving out the time it queued for it; other stores add
// nothing.
type Hold struct {
	held     atomic.Int64
	reported atomic.Bool
}

type holdKey struct{}

// WithHold is ctx with h to add up the time its writes hold a store's
// writer.
func WithHold(ctx context.Context, h *Hold) context.Context {
	return context.WithValue(ctx, holdKey{}, h)
}

// Held reports the time the writes under h held the writer, and whether
// the store reported any (false: the store has no single writer).
func (h *Hold) Held() (time.Duration, bool) {
	return time.Duration(h.held.Load()), h.reported.Load()
}

// AddHold adds d to the Hold of ctx, if it has one: a store that runs
// one write at a time calls it as each write gives the writer up.
func AddHold(ctx context.Context, d time.Duration) {
	if h, ok := ctx.Value(holdKey{}).(*Hold); ok {
		h.held.Add(int64(d))
		h.reported.Store(true)
	}
}

// Pacer spaces the batches of background work (retention) out so that
// they take at most Share of the time: after a batch that took d, Rest
// waits d·(1−Share)/Share, at most MaxRest. The foreground work (runs)
// has the store the rest of the time, and a batch is never more than one
// short transaction in its way.
type Pacer struct {
	// Share is the part of the time the work may take, in (0, 1]; 0 (or
	// 1 and above) does not rest.
	Share float64
	// MaxRest bounds one rest (0: no bound).
	MaxRest time.Duration
}

// Rest waits as the pacer says after a batch that took took; it returns
// ctx's error when ctx ends first.
func (p Pacer) Rest(ctx context.Context, took time.Duration) error {
	if p.Share <= 0 || p.Share >= 1 {
		return ctx.Err()
	}
	d := time.Duration(float64(took) * (1 - p.Share) / p.Share)
	if p.MaxRest > 0 {
		d = min(d, p.MaxRest)
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SpaceReturner is a store that returns the room deleted records leave
// to the file system a little at a time (SQLite's incremental vacuum).
// A store without it keeps that room to reuse: PostgreSQL's autovacuum
// marks it free for new rows, and gives the file's tail back.
type SpaceReturner interface {
	// ReturnSpace returns at most pages free pages and reports how many
	// it returned and how many free ones are left.
	ReturnSpace(ctx context.Context, pages int) (returned, left int, err error)
}
