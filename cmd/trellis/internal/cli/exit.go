package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/runtime/api"
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
	// missing arguments, a file or flow it names that does not exist or
	// holds the wrong thing, input values that do not fit the flow, a
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
  2  usage: a wrong command line or a file it names, input that does not fit the flow, nothing to check
  3  runtime failure: a node failed, no such thread or checkpoint, interrupted
  4  busy thread: another process runs it, or its unfinished run must be resumed or abandoned
  5  store unavailable: the store cannot be opened or reached`

// storeError marks an error opening or reaching the store.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// usageError marks a wrong command line: missing or malformed
// arguments, a file named on it that cannot be read or holds the wrong
// thing.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef is a usageError with a message.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// openRuntime opens the store at addr; an error is a storeError.
func openRuntime(ctx context.Context, addr string, opts ...trellis.RuntimeOption) (*trellis.Runtime, error) {
	rt, err := trellis.Open(ctx, addr, opts...)
	if err != nil {
		return nil, &storeError{err}
	}
	return rt, nil
}

// exitCode maps an error onto the table above.
func exitCode(err error) int {
	var ie *trellis.InputError
	var se *storeError
	var ue *usageError
	var ae *api.Error
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ie), errors.Is(err, store.ErrThreadID), errors.As(err, &ue),
		errors.As(err, &ae) && ae.Code == api.CodeInvalidInput:
		return exitUsage
	case errors.Is(err, trellis.ErrBusy), errors.Is(err, trellis.ErrUnfinished), errors.Is(err, store.ErrLeased), errors.Is(err, store.ErrBusy):
		return exitBusy
	case errors.As(err, &se), store.Classify(err) != store.Permanent:
		return exitStore
	case errors.Is(err, context.Canceled):
		return exitRuntime
	}
	return exitRuntime
}

// failRun reports a failed run and how to go on from a busy or
// unfinished thread.
func failRun(env *Env, name string, at where, err error) int {
	fmt.Fprintf(env.Stderr, "trellis %s: %v\n", name, err)
	switch {
	case errors.Is(err, trellis.ErrUnfinished):
		fmt.Fprintf(env.Stderr, "  `trellis run %s --resume` goes on with it; `trellis abandon %s` gives it up\n", at.run(), at.thread())
	case errors.Is(err, trellis.ErrBusy):
		fmt.Fprintf(env.Stderr, "  `trellis run %s --resume` takes an unfinished run over once the holder's lease has expired\n", at.run())
	}
	return exitCode(err)
}

// where is a run's flow file, thread and store, for the commands a
// message suggests: they name the store unless it is the default, so that
// they act on the same thread when copied.
type where struct{ flow, id, store string }

// run is the arguments of trellis run for the thread.
func (w where) run() string { return shellWord(w.flow) + " --thread " + w.thread() }

// thread is the thread's id and, unless the default, its store.
func (w where) thread() string {
	s := shellWord(w.id)
	if w.store != "" && w.store != trellis.DefaultStore {
		s += " --store " + shellWord(shownStore(w.store))
	}
	return s
}

// shellWord quotes s for a POSIX shell when it holds more than letters,
// digits and . _ / : @ + = , -.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/:@+=,-", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// shownStore is a store's address as printed: a password in it is
// replaced with xxxxx.
func shownStore(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return u.Redacted()
		}
	}
	return addr
}
