package store

import (
	"bytes"
	"context"
	"errors"
)

// Writes tried again: a write that failed for the store (Unavailable)
// may have been committed all the same, its reply lost with the
// connection. Tried again, it finds its own work in the way: the thread
// moved past the checkpoint's parent (ErrConflict, or ErrExists for a
// thread's first checkpoint), the run's record no longer as expected
// (ErrRunChanged), the events' numbers taken (ErrExists). Judged as they
// come, those say another writer got there first (a takeover); they are
// read back instead, and a write that finds its own write id (or its own
// bytes) there succeeded. Each write says so of itself: a checkpoint and
// a run's record carry a WriteID, events their bytes, which hold their
// time.

// CommitOnce commits cp as st.Commit does, trying again as r allows while
// the store is unavailable or full, and gives cp a write id (unless it
// has one) by which a commit tried again recognises its own checkpoint
// (see Recommitted).
func CommitOnce(ctx context.Context, st Store, r *Retrier, cp *Checkpoint) error {
	if cp.WriteID == "" {
		cp.WriteID = NewWriteID()
	}
	return r.Do(ctx, func(again bool) error {
		err := st.Commit(ctx, cp)
		if again {
			err = Recommitted(ctx, st, cp, err)
		}
		return err
	})
}

// Recommitted judges err, the error of a commit of cp tried again after
// a failure that may have come after it committed: it returns nil when
// the thread's checkpoint cp.Seq is cp (its WriteID), committed by the
// earlier attempt, and err otherwise (or the error of reading it back).
// The events cp carried (Events) were committed with it unless refused:
// Refused is set as the run's events say.
func Recommitted(ctx context.Context, st Store, cp *Checkpoint, err error) error {
	if cp.WriteID == "" || !errors.Is(err, ErrConflict) && !errors.Is(err, ErrExists) {
		return err
	}
	cps, rerr := st.History(ctx, cp.Thread, HistoryOptions{After: cp.Seq - 1, Before: cp.Seq + 1, Limit: 1})
	if rerr != nil {
		return rerr
	}
	if len(cps) != 1 || cps[0].WriteID != cp.WriteID {
		return err
	}
	if ea := cp.Events; ea != nil && len(ea.Events) > 0 {
		ea.Refused = true
		if cat, ok := st.(Catalog); ok {
			got, rerr := cat.Events(ctx, ea.Run, ea.Events[0].Seq-1, len(ea.Events))
			if rerr != nil {
				return rerr
			}
			ea.Refused = !SameEvents(got, ea.Events)
		}
	}
	if ea := cp.Events; ea != nil && ea.End != nil {
		// the run's end went with it when its record carries the end's
		// write id
		ea.End.Applied = false
		if cat, ok := st.(Catalog); ok && !ea.Refused && ea.End.Record.WriteID != "" {
			got, rerr := cat.Run(ctx, ea.End.Record.Tenant, ea.End.Record.ID)
			if rerr != nil {
				return rerr
			}
			ea.End.Applied = got.WriteID == ea.End.Record.WriteID
		}
	}
	return nil
}

// Reappended judges err, the error of an append of a run's events tried
// again after a failure that may have come after it committed: nil when
// the run's events with their numbers are these very ones (the earlier
// attempt recorded them), err otherwise (or the error of reading them).
func Reappended(ctx context.Context, cat Catalog, run string, evs []EventRecord, err error) error {
	if len(evs) == 0 || !errors.Is(err, ErrExists) {
		return err
	}
	n, rerr := Recorded(ctx, cat, run, evs)
	if rerr != nil {
		return rerr
	}
	if n == len(evs) {
		return nil
	}
	return err
}

// Recorded reports how many of evs, from the first, the run's events
// hold already, number and bytes: those an earlier write of this writer
// recorded (a write whose reply was lost, or a step's commit that carried
// some of them). Another writer's events at those numbers are other
// bytes (an event holds its time): 0.
func Recorded(ctx context.Context, cat Catalog, run string, evs []EventRecord) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	got, err := cat.Events(ctx, run, evs[0].Seq-1, len(evs))
	if err != nil {
		return 0, err
	}
	n := 0
	for n < len(got) && n < len(evs) && got[n].Seq == evs[n].Seq && bytes.Equal(got[n].Data, evs[n].Data) {
		n++
	}
	return n, nil
}

// SameEvents reports whether two lists of events are the same, number
// and bytes.
func SameEvents(a, b []EventRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Seq != b[i].Seq || !bytes.Equal(a[i].Data, b[i].Data) {
			return false
		}
	}
	return true
}

// UpdateRunOnce changes a run's record as cat.UpdateRun does, trying
// again as r allows while the store is unavailable or full; the record
// gets a write id (unless it has one) by which a change tried again
// recognises its own (see Reupdated).
func UpdateRunOnce(ctx context.Context, cat Catalog, r *Retrier, rec *RunRecord, expect RunState, evs []EventRecord) error {
	if rec.WriteID == "" {
		rec.WriteID = NewWriteID()
	}
	return r.Do(ctx, func(again bool) error {
		err := cat.UpdateRun(ctx, rec, expect, evs)
		if again {
			err = Reupdated(ctx, cat, rec, err)
		}
		return err
	})
}

// Reupdated judges err, the error of a change of a run's record tried
// again after a failure that may have come after it committed: nil when
// the record carries rec's write id (the earlier attempt changed it, and
// recorded its events with it), err otherwise (or the error of reading
// it).
func Reupdated(ctx context.Context, cat Catalog, rec *RunRecord, err error) error {
	if rec.WriteID == "" || !errors.Is(err, ErrRunChanged) {
		return err
	}
	got, rerr := cat.Run(ctx, rec.Tenant, rec.ID)
	if rerr != nil {
		return rerr
	}
	if got.WriteID == rec.WriteID {
		return nil
	}
	return err
}

// EnqueueRunOnce queues a run as cat.EnqueueRun does, trying again as r
// allows while the store is unavailable or full. Before it tries again
// it reads the run back by its id (run ids are made unique): one found
// was queued by the earlier attempt, and is taken as it stands, its
// lease (when it asked for one and is running) taken again, as its
// holder may.
func EnqueueRunOnce(ctx context.Context, cat Catalog, st Store, r *Retrier, rec *RunRecord, policy BusyPolicy) (busy bool, err error) {
	err = r.Do(ctx, func(again bool) error {
		if !again {
			var err error
			busy, err = cat.EnqueueRun(ctx, rec, policy)
			return err
		}
		got, err := cat.Run(ctx, rec.Tenant, rec.ID)
		if errors.Is(err, ErrNotFound) {
			busy, err = cat.EnqueueRun(ctx, rec, policy)
			return err
		}
		if err != nil {
			return err
		}
		lease := rec.Lease
		*rec = *got
		rec.Lease = lease
		busy = got.Status != RunRunning
		if lease != nil {
			lease.Taken = false
			if got.Status == RunRunning {
				if err := st.Acquire(ctx, rec.Thread, lease.Owner, lease.TTL); err == nil {
					lease.Taken = true
				} else if !errors.Is(err, ErrLeased) {
					return err
				}
			}
		}
		return nil
	})
	return busy, err
}
