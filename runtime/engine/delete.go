package engine

import (
	"context"
	"errors"

	"github.com/trellisflow/trellis/runtime/store"
)

// Delete deletes a thread and all its checkpoints while holding its
// lease, as a run would: a thread a run holds, in this process or
// another, is busy (ErrBusy, naming the holder), so the run is not left
// to commit to a thread that is gone. The threads of the child flows it
// ran (subflows) go with it.
func (e *Engine) Delete(ctx context.Context, thread string) error {
	owner, err := e.claim(ctx, thread)
	if err != nil {
		return err
	}
	defer e.free(thread)
	defer e.Store.Release(context.WithoutCancel(ctx), thread, owner)
	if err := e.Store.Delete(ctx, thread); err != nil {
		return err
	}
	children, err := e.Store.Threads(ctx, store.ThreadOptions{Prefix: thread + NSSep})
	if err != nil {
		return err
	}
	for _, c := range children {
		if err := e.Store.Delete(ctx, c.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}
