// What is written before a read: a read through a value that may be null
// meets the members a writer before it gives, and an unset field's read
// is judged by what the expression does with null.

package flow

import (
	"fmt"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/schema"
)

// membersWritten reports whether a read of the members along path (c.x
// for state.f.c.x) by node n (ran: by its edges) meets values, none of
// them null, because of what is written to field before: with replace,
// every write of field gives them and one comes first; with merge or
// deep_merge, which keep the members they do not set, every way to n
// passes a node whose writes give them.
func (c *compiler) membersWritten(field string, path []string, n *Node, ran bool) bool {
	return c.membersWrittenAt(field, path, n, ran, 0)
}

// written is what a node writes to a field: the shape of the value, and
// the values its choices yield (a copy of state, state.g.y, among them).
type written struct {
	shape  *schema.Shape
	leaves []expression.Leaf
}

func (c *compiler) membersWrittenAt(field string, path []string, n *Node, ran bool, depth int) bool {
	f, ok := c.g.fields[field]
	if !ok || f.Reducer == nil || depth > 8 {
		return false
	}
	// a value copied from itself (a node that writes back what it read)
	// has what it had: assumed while it is being judged
	key := fmt.Sprintf("%s|%s|%s|%v", field, strings.Join(path, "."), n.Name, ran)
	if c.judging[key] {
		return true
	}
	if c.judging == nil {
		c.judging = map[string]bool{}
	}
	c.judging[key] = true
	defer delete(c.judging, key)
	// gives reports whether the writes (of writer, nil: any) give the
	// members: their shapes do, or they copy a value that has them where
	// they are made
	has := func(s *schema.Shape) bool {
		if s == nil || !s.Known() || s.MayBeNull() {
			return false
		}
		for _, m := range path {
			if !s.Is("object") || !slices.Contains(s.Required, m) {
				return false
			}
			s = s.Props[m]
			if s == nil || s.MayBeNull() {
				return false
			}
		}
		return true
	}
	// copies reports whether a value that copies state (state.g.y) has
	// the members where writer makes it
	copies := func(reads string, writer *Node) bool {
		rest, ok := strings.CutPrefix(reads, "state.")
		if !ok || writer == nil {
			return false
		}
		from, sub, _ := strings.Cut(rest, ".")
		more := slices.Clone(path)
		if sub != "" {
			more = append(strings.Split(sub, "."), more...)
		}
		return c.membersWrittenAt(from, more, writer, false, depth+1)
	}
	gives := func(ws []written, writer *Node) bool {
		for _, w := range ws {
			if has(w.shape) {
				continue
			}
			for _, l := range w.leaves {
				if !has(l.Shape) && !(l.NotNull && len(path) == 0) && !copies(l.Reads, writer) {
					return false
				}
			}
		}
		return len(ws) > 0
	}
	switch f.Reducer.Spec.Name {
	case "replace":
		if c.writtenShapesCount(field) != c.writers[field] || !c.writtenBefore(field, n, ran) {
			return false
		}
		// the value n meets is the last one written before it: none that
		// may lack them (nor the thread's first value) reaches n without
		// a writer that gives them coming after
		good := map[*Node]bool{}
		var bad []*Node
		for _, m := range c.g.Nodes {
			switch {
			case !m.Writes[field]:
			case gives(c.writtenBy[field][m.Name], m):
				good[m] = true
			default:
				bad = append(bad, m)
			}
		}
		if ran && n.Writes[field] {
			return good[n]
		}
		if c.reachedAvoiding(n, good) {
			return false
		}
		for _, m := range bad {
			if c.reachedFrom(m, n, good) {
				return false
			}
		}
		return true
	case "merge", "deep_merge":
		good := map[*Node]bool{}
		for _, m := range c.g.Nodes {
			good[m] = m.Writes[field] && gives(c.writtenBy[field][m.Name], m)
		}
		if ran && good[n] {
			return true
		}
		return !c.reachedAvoiding(n, good)
	}
	return false
}

// reachedAvoiding reports whether some way from START reaches n without
// passing a node of avoid; a join is reached that way only when all its
// sources are.
func (c *compiler) reachedAvoiding(n *Node, avoid map[*Node]bool) bool {
	return c.reachedFrom(nil, n, avoid)
}

// reachedFrom is reachedAvoiding from after node from ran (nil: START):
// from counts as reached for the joins it is a source of, and n is
// reached only by a way that leaves from.
func (c *compiler) reachedFrom(from, n *Node, avoid map[*Node]bool) bool {
	reached := map[*Node]bool{}
	var queue []*Node
	add := func(m *Node) {
		if !reached[m] {
			reached[m] = true
			queue = append(queue, m)
		}
	}
	if from == nil {
		for _, m := range entryTargets(c.g) {
			add(m)
		}
	} else {
		// its edges are taken below, as a reached node's are; it is
		// reached again only by a way back to it
		queue = append(queue, from)
	}
	for changed := true; changed; {
		changed = false
		for len(queue) > 0 {
			m := queue[0]
			queue = queue[1:]
			if avoid[m] {
				continue
			}
			for _, e := range m.Out {
				if len(e.From) > 1 {
					continue // joins below
				}
				for _, t := range e.Targets() {
					add(t)
				}
			}
			if m.OnError.Route != nil {
				add(m.OnError.Route)
			}
		}
		for _, e := range c.g.Edges {
			if len(e.From) < 2 {
				continue
			}
			// (from a node, a join's other sources may have been reached
			// by a way that started before it: one of them reached is
			// enough)
			all, one := true, false
			for _, s := range e.From {
				all = all && reached[s] && !avoid[s]
				one = one || reached[s] || s == from
			}
			if from != nil {
				all = one && !slices.ContainsFunc(e.From, func(s *Node) bool { return avoid[s] })
			}
			for _, t := range e.Targets() {
				if all && !reached[t] {
					add(t)
					changed = true
				}
			}
		}
	}
	return reached[n]
}

// writtenShapesCount is how many writes of field the checker knows the
// values of.
func (c *compiler) writtenShapesCount(field string) int { return len(c.writtenShapes[field]) }

// leavesKeepText reports whether every value p can yield keeps dst's
// text rules: its literals are judged one by one (above), each other
// branch by its shape's own rules.
func leavesKeepText(p *expression.Program, dst *schema.Shape) bool {
	if p.Type().WithoutNull().KeepsText(dst) {
		return true
	}
	for _, l := range p.Leaves() {
		if !l.Known && !l.Shape.WithoutNull().KeepsText(dst) {
			return false
		}
	}
	return true
}

// takesNull reports whether p's value, of shape value when a field it
// reads is unset, still goes where p's value goes: a field that holds
// it (a reducer that skips null, a list of items that take it), as far
// as the checker knows where it goes.
func (c *compiler) takesNull(p *expression.Program, value *schema.Shape) bool {
	f, ok := c.dests[p]
	if !ok {
		return !value.MayBeNull() && !p.Type().MayBeNull() && !nullInside(value)
	}
	switch f.Reducer.Spec.Name {
	case "replace":
		return len(schema.Fits(value, f.Shape, "")) == 0
	case "append", "union":
		if value.MayBeNull() && !f.Shape.Items.Allows("null") {
			return false // null is one item, as the engine appends it
		}
		item := value.WithoutNull()
		if item.Is("array") {
			item = item.Items
		}
		return item == nil || !item.MayBeNull() || len(schema.Fits(item, f.Shape.Items, "")) == 0
	case "merge", "deep_merge":
		v := value.WithoutNull()
		return !v.Is("object") || len(schema.Fits(v, f.Shape, "")) == 0
	}
	return !value.MayBeNull()
}

// nullInside reports whether a list's items or an object's members may
// be null.
func nullInside(s *schema.Shape) bool {
	if s == nil {
		return false
	}
	if s.Items != nil && s.Items.MayBeNull() {
		return true
	}
	for _, p := range s.Props {
		if p.MayBeNull() {
			return true
		}
	}
	return false
}
