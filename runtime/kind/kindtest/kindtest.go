// Package kindtest provides node kinds for testing the runtime without the
// built-in kinds:
//
//   - set: like assign, writes expressions to fields
//     ({set: {field: expr}}); an optional sleep_ms expression delays it,
//     and jitter_ms adds a random delay of up to that many milliseconds.
//   - fail: fails its first `times` attempts of each run with `message`
//     (times 0: always), then writes `set` like the set kind.
//   - sleep: waits `ms` milliseconds (honouring cancellation, unless
//     `ignore_cancel`), then writes `set`.
//
// Registry returns a registry with these kinds.
package kindtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
)

var (
	once sync.Once
	reg  *kind.Set
)

// Registry returns the test kinds.
func Registry() kind.Registry {
	once.Do(func() {
		set := config.Map("set", "Field to expression.", nil)
		reg = kind.NewSet(
			kind.Spec{Name: "set", Summary: "Write expressions to fields.", New: newSet, Fields: []config.Field{
				set, config.Expression("sleep_ms", "Milliseconds to wait first."), config.Integer("jitter_ms", "A random extra wait, up to this.")}},
			kind.Spec{Name: "fail", Summary: "Fail the first attempts, then write.", New: newFail, Fields: []config.Field{
				set, config.Integer("times", "Attempts that fail (0: all)."), config.String("message", "The failure's message.")}},
			kind.Spec{Name: "sleep", Summary: "Wait, then write.", New: newSleep, Fields: []config.Field{
				set, config.Integer("ms", "Milliseconds to wait."), config.Bool("ignore_cancel", "Wait even when cancelled.")}},
		)
	})
	return reg
}

type setNode struct {
	sets   kind.Writes
	sleep  *expression.Program
	jitter int
}

// CompileSet compiles the node's set: block (field: expression), for
// test kinds of other packages too.
func CompileSet(b kind.Builder) kind.Writes {
	w, _ := kind.CompileWrites(b, "set", nil)
	return w
}

func newSet(b kind.Builder) kind.Node {
	s := b.Settings()
	n := &setNode{sets: CompileSet(b)}
	if v := s.Value("sleep_ms"); v.Exists() {
		n.sleep = b.Expr(v, nil)
	}
	n.jitter, _ = s.Int("jitter_ms")
	return n
}

func (n *setNode) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	if n.jitter > 0 {
		time.Sleep(time.Duration(rand.IntN(n.jitter*1000)) * time.Microsecond)
	}
	if n.sleep != nil {
		v, err := n.sleep.Eval(s.Vars())
		if err != nil {
			return nil, err
		}
		ms, _ := v.(int)
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return n.sets.Eval(s.Vars())
}

type failNode struct {
	sets    kind.Writes
	times   int
	message string
}

func newFail(b kind.Builder) kind.Node {
	s := b.Settings()
	n := &failNode{sets: CompileSet(b), message: "injected failure"}
	n.times, _ = s.Int("times")
	if m, ok := s.String("message"); ok {
		n.message = m
	}
	return n
}

// ErrInjected is the error fail nodes return.
var ErrInjected = errors.New("injected")

func (n *failNode) Run(_ context.Context, s kind.State) (kind.Update, error) {
	if n.times == 0 || s.Attempt() <= n.times {
		return nil, fmt.Errorf("%w: %s (attempt %d)", ErrInjected, n.message, s.Attempt())
	}
	return n.sets.Eval(s.Vars())
}

type sleepNode struct {
	sets         kind.Writes
	ms           int
	ignoreCancel bool
}

func newSleep(b kind.Builder) kind.Node {
	s := b.Settings()
	n := &sleepNode{sets: CompileSet(b)}
	n.ms, _ = s.Int("ms")
	n.ignoreCancel, _ = s.Bool("ignore_cancel")
	return n
}

func (n *sleepNode) Run(ctx context.Context, s kind.State) (kind.Update, error) {
	d := time.Duration(n.ms) * time.Millisecond
	if n.ignoreCancel {
		time.Sleep(d)
	} else {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return n.sets.Eval(s.Vars())
}
