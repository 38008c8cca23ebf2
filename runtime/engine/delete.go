package engine

import (
	"context"
)

// Delete deletes a thread and everything the store keeps of it (see
// store.Store.Delete: the threads of the child flows it ran, and a
// served thread's records, go with it) while holding its lease, as a run
// would: a thread a run holds, in this process or another, is busy
// (ErrBusy, naming the holder), so the run is not left to commit to a
// thread that is gone.
func (e *Engine) Delete(ctx context.Context, thread string) error {
	owner, err := e.claim(ctx, thread, false, nil)
	if err != nil {
		return err
	}
	defer e.free(thread)
	defer e.Store.Release(context.WithoutCancel(ctx), thread, owner)
	return e.Store.Delete(ctx, thread)
}
