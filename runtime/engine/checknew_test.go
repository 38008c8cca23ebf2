package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// CheckNew refuses the initial values and input a run making a new
// thread refuses, in the same words, and accepts what it accepts;
// CheckInput judges each input value on its own.
func TestCheckNewAsARunChecks(t *testing.T) {
	g := compile(t, `
version: 1
name: req
input: [said, count]
state:
	schema:
		type: object
		required: [who]
		properties:
			who: {type: string, minLength: 1}
			said: {type: string, default: ""}
			count: {type: integer, minimum: 0, default: 0}
			greeting: {type: string, default: ""}
nodes:
	greet: {kind: set, set: {greeting: "'Hello, ' + state.who"}}
edges:
	- {from: START, to: greet}
	- {from: greet, to: END}
`)
	eng := engine.New(memory.New())
	for i, c := range []struct {
		values, input map[string]any
		ok            bool
	}{
		{map[string]any{"who": "Ann"}, nil, true},
		{map[string]any{"who": "Ann"}, map[string]any{"said": "hi", "count": 2}, true},
		{nil, nil, false},
		{nil, map[string]any{"said": "hi"}, false},
		{map[string]any{"who": ""}, nil, false},
		{map[string]any{"woh": "Ann"}, nil, false},
		{map[string]any{"who": "Ann"}, map[string]any{"count": -1}, false},
		{map[string]any{"who": "Ann"}, map[string]any{"count": "x", "sayd": "hi"}, false},
		{map[string]any{"who": "Ann"}, map[string]any{"greeting": "x"}, false},
	} {
		thread := fmt.Sprintf("t%d", i)
		checked := engine.CheckNew(g, c.values, c.input)
		_, ran := eng.Run(context.Background(), g, engine.Request{Thread: thread, Values: c.values, Input: c.input})
		if (checked == nil) != c.ok || (ran == nil) != c.ok {
			t.Errorf("%v %v: checked %v, ran %v", c.values, c.input, checked, ran)
			continue
		}
		if !c.ok && checked.Error() != ran.Error() {
			t.Errorf("%v %v: checked %q, ran %q", c.values, c.input, checked, ran)
		}
		var ie *engine.InputError
		if !c.ok && !errors.As(checked, &ie) {
			t.Errorf("%v %v: %T %v", c.values, c.input, checked, checked)
		}
	}
	if _, err := eng.Store.Head(context.Background(), "check"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CheckNew made a thread: %v", err)
	}
	if err := engine.CheckInput(g, map[string]any{"said": "hi", "count": 3}); err != nil {
		t.Error(err)
	}
	err := engine.CheckInput(g, map[string]any{"count": -1, "sayd": "hi"})
	var ie *engine.InputError
	if !errors.As(err, &ie) || len(ie.More) != 1 {
		t.Errorf("two bad inputs: %v", err)
	}
}
