// Package noop is the noop node kind: it writes nothing. It marks a point in
// the graph, such as a router that fans out to parallel nodes.
package noop

import (
	"context"

	"github.com/trellisflow/trellis/runtime/kind"
)

// Spec registers the kind.
var Spec = kind.Spec{
	Name:    "noop",
	Summary: "Do nothing; a junction for fan-out, joins and routing.",
	New:     func(kind.Builder) kind.Node { return node{} },
	Inline:  true,
}

type node struct{}

// Run implements kind.Node.
func (node) Run(context.Context, kind.State) (kind.Update, error) { return nil, nil }
