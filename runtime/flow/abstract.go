package flow

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
)

// ------------------------------------------------------ abstract execution

// The abstract execution runs the flow without values: a state is the set
// of nodes triggered for the next superstep plus each join's arrivals, and
// every condition may go either way. Its states and moves answer three
// questions: which nodes can run in one superstep (write conflicts),
// which joins can be left waiting (starving joins), and which fields are
// written on every way to a step (definite assignment: a join waits for
// all its sources, exclusive branches are apart, a loop's first round
// counts, a map's items may be none, on_error writes only on failure).

// fieldSet is a set of field indexes.
type fieldSet []uint64

func newFieldSet(n int) fieldSet { return make(fieldSet, (n+63)/64) }

func (s fieldSet) add(i int)      { s[i/64] |= 1 << (i % 64) }
func (s fieldSet) has(i int) bool { return i/64 < len(s) && s[i/64]&(1<<(i%64)) != 0 }

// union returns s ∪ o as a new set (either may be nil: empty).
func (s fieldSet) union(o fieldSet) fieldSet {
	out := make(fieldSet, max(len(s), len(o)))
	copy(out, s)
	for i, w := range o {
		out[i] |= w
	}
	return out
}

// intersect returns s ∩ o as a new set.
func (s fieldSet) intersect(o fieldSet) fieldSet {
	out := make(fieldSet, max(len(s), len(o)))
	for i := range min(len(s), len(o)) {
		out[i] = s[i] & o[i]
	}
	return out
}

func (s fieldSet) equal(o fieldSet) bool {
	for i := range max(len(s), len(o)) {
		var a, b uint64
		if i < len(s) {
			a = s[i]
		}
		if i < len(o) {
			b = o[i]
		}
		if a != b {
			return false
		}
	}
	return true
}

// emission is what one choice of one node sends on: triggered nodes,
// arrivals at joins, and the fields written on the way.
type emission struct {
	targets  []int
	arrivals [][2]int // join slot, source node index
	writes   fieldSet
}

func (e emission) key() string {
	var b strings.Builder
	for _, t := range e.targets {
		b.WriteString(strconv.Itoa(t))
		b.WriteByte(',')
	}
	b.WriteByte('|')
	for _, a := range e.arrivals {
		fmt.Fprintf(&b, "%d:%d,", a[0], a[1])
	}
	return b.String()
}

// maxAbstractStates caps the abstract execution; a flow beyond it is
// reported as too complex to analyse rather than analysed partially.
const maxAbstractStates = 20000

// absState is one state of the abstract execution.
type absState struct {
	triggered []int
	joins     []uint64 // per join, the bitset of its sources (by position in From) that arrived
	// must holds the fields written on every way from START to this
	// state; nil until a way is known.
	must  fieldSet
	moves []absMove
}

// absMove is one superstep: the state it leads to and the fields the
// step's nodes wrote, for one choice of each node's outcome.
type absMove struct {
	to     int
	writes fieldSet
}

// abstractRun is the explored abstract execution.
type abstractRun struct {
	states  []*absState
	initial []int
	// overflow is set when the exploration stopped at maxAbstractStates:
	// the definite-assignment questions then fall back to the graph.
	overflow bool
	// fire is what a node writes whenever its edges fire (its success, or
	// a failure that on_error.set handles); least what it writes whatever
	// its outcome, for siblings sharing its step.
	fire, least []fieldSet
	// at lists, per node, the states in which it is triggered.
	at [][]int
}

// fieldSetOf is the set of the named fields.
func (c *compiler) fieldSetOf(names map[string]bool) fieldSet {
	s := newFieldSet(len(c.g.Fields))
	for name := range names {
		if f, ok := c.g.fields[name]; ok {
			s.add(f.Index)
		}
	}
	return s
}

// outcomes lists what a run of n can send on, each with what it wrote:
// its edges' choices after a success; after a failure that on_error
// handles, the error route, or its edges with on_error.set's writes.
// Identical emissions are merged, their writes intersected.
func (c *compiler) outcomes(n *Node) (out []emission, fire, least fieldSet) {
	success := c.fieldSetOf(c.definite[n.Name])
	failure := c.fieldSetOf(c.errorWrites[n.Name])
	fire = success
	for _, em := range nodeOutcomes(n.Out, n) {
		em.writes = success
		out = append(out, em)
	}
	if n.OnError.Route != nil {
		out = append(out, emission{targets: []int{n.OnError.Route.Index}, writes: failure})
	} else if n.OnError.Handled {
		fire = success.intersect(failure)
		for _, em := range nodeOutcomes(n.Out, n) {
			em.writes = failure
			out = append(out, em)
		}
	}
	index := map[string]int{}
	merged := out[:0]
	for _, em := range out {
		k := em.key()
		if i, ok := index[k]; ok {
			merged[i].writes = merged[i].writes.intersect(em.writes)
			continue
		}
		index[k] = len(merged)
		merged = append(merged, em)
	}
	least = success
	for _, em := range merged {
		least = least.intersect(em.writes)
	}
	return merged, fire, least
}

// explore runs the flow abstractly (see above): nodes found together in a
// triggered set can run in one superstep; a finished run with a
// partly-arrived join means that join can starve; and the fields written
// on every way to each state are kept for the definite-assignment checks.
func (c *compiler) explore() {
	g := c.g
	joinEdge := make([]*Edge, g.Joins)
	for _, e := range g.Edges {
		if e.Join >= 0 {
			joinEdge[e.Join] = e
		}
	}
	run := &abstractRun{fire: make([]fieldSet, len(g.Nodes)), least: make([]fieldSet, len(g.Nodes)), at: make([][]int, len(g.Nodes))}
	c.abs = run
	outcomes := make([][]emission, len(g.Nodes))
	for _, n := range g.Nodes {
		outcomes[n.Index], run.fire[n.Index], run.least[n.Index] = c.outcomes(n)
	}
	key := func(s *absState) string {
		var b strings.Builder
		for _, t := range s.triggered {
			b.WriteString(strconv.Itoa(t))
			b.WriteByte(',')
		}
		b.WriteByte('|')
		for _, j := range s.joins {
			b.WriteString(strconv.FormatUint(j, 16))
			b.WriteByte(',')
		}
		return b.String()
	}
	apply := func(joins []uint64, em []emission) (*absState, fieldSet) {
		next := &absState{joins: slices.Clone(joins)}
		var writes fieldSet
		set := map[int]bool{}
		for _, e := range em {
			writes = writes.union(e.writes)
			for _, t := range e.targets {
				set[t] = true
			}
			for _, a := range e.arrivals {
				je := joinEdge[a[0]]
				for pos, src := range je.From {
					if src.Index == a[1] {
						next.joins[a[0]] |= 1 << pos
					}
				}
				if next.joins[a[0]] == (1<<len(je.From))-1 {
					next.joins[a[0]] = 0
					for _, t := range je.To {
						set[t.Index] = true
					}
				}
			}
		}
		for t := range set {
			next.triggered = append(next.triggered, t)
		}
		slices.Sort(next.triggered)
		return next, writes
	}
	index := map[string]int{}
	var work []int
	add := func(s *absState) int {
		k := key(s)
		if i, ok := index[k]; ok {
			return i
		}
		i := len(run.states)
		index[k] = i
		run.states = append(run.states, s)
		for _, t := range s.triggered {
			run.at[t] = append(run.at[t], i)
		}
		work = append(work, i)
		return i
	}
	for _, em := range product(nodeOutcomesList(g.Entry)) {
		s, _ := apply(make([]uint64, g.Joins), em)
		i := add(s)
		if !slices.Contains(run.initial, i) {
			run.initial = append(run.initial, i)
		}
	}
	coRun := map[[2]int]bool{}
	starved := map[int]uint64{}
	for len(work) > 0 {
		if len(run.states) > maxAbstractStates {
			run.overflow = true
			c.dl.Add(diag.Diagnostic{Severity: diag.Warning, Code: diag.CodeWriteConflict, Pos: diag.Pos{File: c.doc.Path, Line: 1, Col: 1},
				Summary: fmt.Sprintf("the flow has more than %d abstract states; write conflicts and starving joins were not fully checked", maxAbstractStates)})
			break
		}
		si := work[len(work)-1]
		work = work[:len(work)-1]
		s := run.states[si]
		if len(s.triggered) == 0 {
			for j, bits := range s.joins {
				if _, found := starved[j]; !found && bits != 0 {
					starved[j] = bits // the first run found that strands it
				}
			}
			continue
		}
		for i, a := range s.triggered {
			for _, b := range s.triggered[i+1:] {
				coRun[[2]int{a, b}] = true
			}
		}
		choices := make([][]emission, len(s.triggered))
		for i, t := range s.triggered {
			choices[i] = outcomes[t]
			if len(choices[i]) == 0 {
				choices[i] = []emission{{}}
			}
		}
		for _, em := range product(choices) {
			ns, writes := apply(s.joins, em)
			s.moves = append(s.moves, absMove{to: add(ns), writes: writes})
		}
	}
	c.conflicts(coRun)
	for _, j := range slices.Sorted(mapsKeys(starved)) {
		je := joinEdge[j]
		var arrived, missing []string
		for pos, src := range je.From {
			if starved[j]&(1<<pos) != 0 {
				arrived = append(arrived, src.Name)
			} else {
				missing = append(missing, src.Name)
			}
		}
		c.dl.Errorf(diag.CodeJoinStarves, je.Pos, fmt.Sprintf("edges[%d]", je.Index),
			"join into %s can wait forever: a run can end after %s arrived without %s",
			names(je.To, je.ToEnd), strings.Join(arrived, ", "), strings.Join(missing, ", ")).
			Detail = "a branch or route upstream can skip " + strings.Join(missing, ", ") + "; join only nodes that always run together"
	}
	if !run.overflow {
		run.solve(len(g.Fields))
	}
}

// solve computes each state's must set: the fields written on every way
// from START to it (the meet over all paths, by iteration to a fixpoint;
// the sets only shrink once known).
func (r *abstractRun) solve(fields int) {
	work := slices.Clone(r.initial)
	for _, i := range r.initial {
		r.states[i].must = newFieldSet(fields)
	}
	for len(work) > 0 {
		s := r.states[work[len(work)-1]]
		work = work[:len(work)-1]
		for _, mv := range s.moves {
			cand := s.must.union(mv.writes)
			t := r.states[mv.to]
			switch {
			case t.must == nil:
				t.must = cand
			case !t.must.intersect(cand).equal(t.must):
				t.must = t.must.intersect(cand)
			default:
				continue
			}
			work = append(work, mv.to)
		}
	}
}

// available is what a reader sees set in state si: for a node, what every
// way there wrote; for its outgoing edge (ran), also what the node and
// the others of its step wrote.
func (r *abstractRun) available(si int, n *Node, ran bool) fieldSet {
	s := r.states[si]
	avail := s.must
	if ran {
		avail = avail.union(r.fire[n.Index])
		for _, t := range s.triggered {
			if t != n.Index {
				avail = avail.union(r.least[t])
			}
		}
	}
	return avail
}

// unsetAt returns a state in which n (or, ran, its edge) reads field
// with nothing written to it on some way there, and whether there is one.
func (r *abstractRun) unsetAt(field int, n *Node, ran bool) (int, bool) {
	for _, si := range r.at[n.Index] {
		if r.states[si].must == nil {
			continue // no way reaches it
		}
		if !r.available(si, n, ran).has(field) {
			return si, true
		}
	}
	return 0, false
}

// witness is a way from START to state target on which no step writes
// field: the triggered sets of the states it passes, START first.
func (r *abstractRun) witness(field, target int) [][]int {
	prev := map[int]int{}
	seen := map[int]bool{}
	var queue []int
	for _, i := range r.initial {
		if !seen[i] {
			seen[i] = true
			prev[i] = -1
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		si := queue[0]
		queue = queue[1:]
		if si == target {
			var steps [][]int
			for x := si; x >= 0; x = prev[x] {
				steps = append([][]int{r.states[x].triggered}, steps...)
			}
			return steps
		}
		for _, mv := range r.states[si].moves {
			if mv.writes.has(field) || seen[mv.to] {
				continue
			}
			seen[mv.to] = true
			prev[mv.to] = si
			queue = append(queue, mv.to)
		}
	}
	return nil
}

// showSteps renders a way through the steps: START → a → [b, c] → d.
func (c *compiler) showSteps(steps [][]int) string {
	parts := []string{startName}
	for _, st := range steps {
		var ns []string
		for _, i := range st {
			ns = append(ns, c.g.Nodes[i].Name)
		}
		if len(ns) == 1 {
			parts = append(parts, ns[0])
		} else {
			parts = append(parts, "["+strings.Join(ns, ", ")+"]")
		}
	}
	return strings.Join(parts, " → ")
}

// whyUnset says why the writers of field do not write it before a read by
// n in the last step of steps: they are not on the way, they run in the
// reader's own step, their write is per item of a map or on failure only.
func (c *compiler) whyUnset(field string, n *Node, steps [][]int) string {
	var writers []*Node
	for _, m := range c.g.Nodes {
		if m.Writes[field] {
			writers = append(writers, m)
		}
	}
	if len(writers) == 0 {
		return "no node writes it"
	}
	passed := map[int]bool{}
	for _, st := range steps[:len(steps)-1] {
		for _, i := range st {
			passed[i] = true
		}
	}
	last := steps[len(steps)-1]
	var reasons []string
	for _, w := range writers {
		switch {
		case w == n:
			reasons = append(reasons, fmt.Sprintf("%s writes it only after this read", w.Name))
		case slices.Contains(last, w.Index):
			reasons = append(reasons, fmt.Sprintf("%s writes it in the same step, which this node does not see", w.Name))
		case passed[w.Index] && !c.definite[w.Name][field] && c.errorWrites[w.Name][field]:
			reasons = append(reasons, fmt.Sprintf("%s writes it only when it fails (on_error.set)", w.Name))
		case passed[w.Index] && !c.definite[w.Name][field]:
			reasons = append(reasons, fmt.Sprintf("%s writes it once per item, and its list may be empty", w.Name))
		default:
			reasons = append(reasons, fmt.Sprintf("%s writes it, but this way does not pass %s", w.Name, w.Name))
		}
	}
	return strings.Join(reasons, "; ")
}

// nodeOutcomesList lists the options of START's edges.
func nodeOutcomesList(edges []*Edge) [][]emission {
	var out [][]emission
	for _, e := range edges {
		out = append(out, edgeOptions(e, nil))
	}
	return out
}
