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

// Sets is a compiled set: block (field: expression), for test kinds of
// other packages too.
type Sets []assignment

type assignment struct {
	field string
	prog  *expression.Program
}

type setNode struct {
	sets   Sets
	sleep  *expression.Program
	jitter int
}

// CompileSet compiles the node's set: block, declaring its writes.
func CompileSet(b kind.Builder) Sets {
	var out Sets
	for _, e := range b.Settings().Entries("set") {
		b.Writes(e.Name, e.Key)
		if p := b.Expr(e.Value, nil); p != nil {
			b.WritesValue(e.Name, p, e.Value)
			out = append(out, assignment{e.Name, p})
		}
	}
	return out
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

// Eval evaluates every expression into an update.
func (sets Sets) Eval(s kind.State) (kind.Update, error) {
	upd := make(kind.Update, 0, len(sets))
	for _, a := range sets {
		v, err := a.prog.Eval(s.Vars())
		if err != nil {
			return nil, err
		}
		upd = append(upd, kind.FieldValue{Field: a.field, Value: v})
	}
	return upd, nil
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
	return n.sets.Eval(s)
}

type failNode struct {
	sets    Sets
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
	return n.sets.Eval(s)
}

type sleepNode struct {
	sets         Sets
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
	return n.sets.Eval(s)
}
