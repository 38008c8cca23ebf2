package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/store"
)

// The exit codes of every command, whichever way it reaches the error
// (documented in README.md and `trellis --help`).
const (
	exitOK = 0
	// exitFailed: what was checked is wrong: an invalid flow (validate,
	// and any command given one), failing flow tests, flows that differ
	// (diff), code that fails (sandbox run).
	exitFailed = 1
	// exitUsage: the command line is wrong: unknown command or flag,
	// missing arguments, input values that do not fit the flow, a
	// thread id outside the allowed set, nothing to check.
	exitUsage = 2
	// exitRuntime: the run or the operation failed: a node failed, a
	// thread or checkpoint does not exist, the run was interrupted.
	exitRuntime = 3
	// exitBusy: the thread is busy: another process holds its lease, or
	// its last run is unfinished and must be resumed or abandoned first.
	exitBusy = 4
	// exitStore: the store cannot be opened or reached.
	exitStore = 5
)

const exitCodes = `Exit codes:
  0  success
  1  what was checked is wrong: an invalid flow, failing flow tests, flows that differ
  2  usage: a wrong command line, input that does not fit the flow, nothing to check
  3  runtime failure: a node failed, no such thread or checkpoint, interrupted
  4  busy thread: another process runs it, or its unfinished run must be resumed or abandoned
  5  store unavailable: the store cannot be opened or reached`

// storeError marks an error opening or reaching the store.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// exitCode maps an error onto the table above.
func exitCode(err error) int {
	var ie *trellis.InputError
	var se *storeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ie), errors.Is(err, store.ErrThreadID):
		return exitUsage
	case errors.Is(err, trellis.ErrBusy), errors.Is(err, trellis.ErrUnfinished), errors.Is(err, store.ErrLeased):
		return exitBusy
	case errors.As(err, &se):
		return exitStore
	case errors.Is(err, context.Canceled):
		return exitRuntime
	}
	return exitRuntime
}

// failRun reports a failed run of FLOW on THREAD and how to go on from
// a busy or unfinished thread.
func failRun(env *Env, name, flowPath, thread string, err error) int {
	fmt.Fprintf(env.Stderr, "trellis %s: %v\n", name, err)
	switch {
	case errors.Is(err, trellis.ErrUnfinished):
		fmt.Fprintf(env.Stderr, "  `trellis run %s --thread %s --resume` goes on with it; `trellis abandon %s` gives it up\n", flowPath, thread, thread)
	case errors.Is(err, trellis.ErrBusy):
		fmt.Fprintf(env.Stderr, "  `trellis run %s --thread %s --resume` takes an unfinished run over once the holder's lease has expired\n", flowPath, thread)
	}
	return exitCode(err)
}
