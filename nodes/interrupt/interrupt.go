// Package interrupt is the interrupt node kind: it pauses the run to ask
// something of a person (an approval, a correction, a choice) and, when a
// later run resumes the thread with the answer, writes it to state.
//
//	approve:
//	  kind: interrupt
//	  ask: "{'question': 'Pay ' + string(state.amount) + '?', 'amount': state.amount}"
//	  writes:
//	    approved: "answer == true"
//	    note: "answer == true ? '' : string(answer)"
//
// ask is an expression over state and input whose value (any JSON value)
// is the question; writes are expressions over answer, state and input.
// Several interrupts of one step are asked together, each by its node's
// name; an answer given for some of them is kept until the others are
// answered. An interrupt run by a map for each item asks once per item
// (NODE[INDEX]); one in a subflow, at any depth, pauses the run that runs
// the subflow, its question named by its path (review/approve) and
// answered by it or its id.
package interrupt

import (
	"context"
	"errors"
	"maps"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "interrupt",
	Summary: "Pause the run to ask a person something; the resumed run's answer is written to state.",
	Fields: []config.Field{
		config.Expression("ask", "The question: an expression over state and input (any JSON value, such as a text or an object), which the paused run reports.").Require(),
		config.Map("writes", "Field to expression over answer (the value the resumed run supplies), state and input.",
			config.Elem(config.Expression("", ""))),
	},
	New:    build,
	Inline: true,
}

type node struct {
	ask    *expression.Program
	writes kind.Writes
}

func build(b kind.Builder) kind.Node {
	n := &node{}
	if v := b.Settings().Value("ask"); v.Exists() {
		n.ask = b.Expr(v, nil)
	}
	n.writes, _ = kind.CompileWrites(b, "writes", kind.Vars{"answer": nil})
	return n
}

// Ask implements kind.Asker.
func (n *node) Ask(s kind.State) (any, error) {
	if n.ask == nil {
		return nil, errors.New("the node's ask did not compile")
	}
	return s.Eval(n.ask)
}

// Run implements kind.Node: it writes the answer.
func (n *node) Run(_ context.Context, s kind.State) (kind.Update, error) {
	answer, ok := s.Answer()
	if !ok {
		return nil, kind.Permanent(errors.New("no answer: the run should have paused to ask"))
	}
	vars := maps.Clone(s.Vars())
	vars["answer"] = answer
	return n.writes.Eval(vars)
}
