// Package store defines how threads and their checkpoints are persisted.
// A thread is one conversation; each committed superstep of a run adds one
// checkpoint to the thread's chain. A checkpoint records only what changed:
// the fields written (an append field records only the appended items), the
// nodes that wrote them, and where the run goes next.
package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Errors every store returns for the same conditions.
var (
	// ErrNotFound: no such thread or checkpoint.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the checkpoint's parent is not the thread's head; some
	// other writer advanced the thread.
	ErrConflict = errors.New("thread was advanced by another writer")
	// ErrExists: a thread with that id already exists.
	ErrExists = errors.New("thread already exists")
	// ErrLeased: another owner holds the thread's lease.
	ErrLeased = errors.New("thread is leased by another run")
	// ErrThreadID: a new thread's id is not of the form CheckThreadID
	// allows.
	ErrThreadID = errors.New("invalid thread id")
)

// LeasedError is ErrLeased with who holds the lease and until when.
type LeasedError struct {
	Owner string
	Until time.Time
}

func (e *LeasedError) Error() string {
	return fmt.Sprintf("%v (by %s until %s)", ErrLeased, e.Owner, e.Until.UTC().Format(time.RFC3339))
}

// Is makes a LeasedError an ErrLeased.
func (e *LeasedError) Is(target error) bool { return target == ErrLeased }

// CheckThreadID checks the id of a thread about to be created: 1 to 256
// of the ASCII letters and digits and . _ : - / @ +, so that an id is safe
// to print, to put in a path or a URL, and to type.
func CheckThreadID(id string) error {
	ok := len(id) > 0 && len(id) <= 256
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-/@+", c) >= 0
	}
	if !ok {
		return fmt.Errorf("%w %q: a thread id is 1 to 256 of the letters and digits (ASCII) and . _ : - / @ +", ErrThreadID, id)
	}
	return nil
}

// Checkpoint is one committed step of a thread.
type Checkpoint struct {
	Thread string
	// Seq numbers the thread's checkpoints from 1; Parent is the previous
	// one's Seq (0 for the first).
	Seq    uint64
	Parent uint64
	// Run identifies the run that wrote it, Step the superstep within it
	// (0 for the run's input).
	Run  string
	Step int
	// Source says what wrote the checkpoint.
	Source Source
	Time   time.Time
	// Writes are the fields that changed.
	Writes []Write
	// Writers lists each node that ran in the step with the fields it
	// wrote, in declaration order.
	Writers []NodeWrites
	// Next lists the nodes triggered for the following superstep; empty
	// when the run finished. A thread whose newest checkpoint has Next
	// holds an unfinished run that can be resumed.
	Next []string
	// Joins carries the unfinished run's join arrivals (per join slot).
	Joins []uint64
	// Config is the run configuration a run's input checkpoint records
	// (the values given, none marked secret), so that a resumed run has it
	// again.
	Config map[string]any
	// Input is the input of the unfinished run a fork carries (its own
	// input checkpoint is another thread's), so that the fork's run goes
	// on with it; of an update, the values it was given (its writes hold
	// what the reducers made of them).
	Input map[string]any
	// Base is the checkpoint whose state this one goes on from when that
	// is not Parent, the thread's head it was committed after: a branch,
	// written by an update at an older checkpoint. 0 when it is Parent.
	Base uint64
	// Replies are what the step's nodes were told from outside the run,
	// as they were told it: a model's replies. A replay of the thread, or
	// a flow test made from it, gives them again.
	Replies []Reply
	// Answers are the answers the step's asking nodes ran with, by node.
	Answers map[string]any
	// Events, when set, are the events of the run that wrote the
	// checkpoint, recorded in the checkpoint's transaction by a store
	// that is a Catalog (others ignore them).
	Events *EventAppend
	// Release, when set, is the owner of the thread's lease that the
	// commit releases (as Release does) in its transaction: the last
	// checkpoint of a run. A failed commit releases nothing.
	Release string
	// WriteID, when set, is recorded with the checkpoint, so that a
	// commit tried again after a failure that may have come after it
	// committed recognises its own checkpoint (see Recommitted).
	WriteID string
	// Memory, when set, are the documents the step's nodes put (the
	// memory kind), written in the checkpoint's transaction by a store
	// that keeps a Memory (others ignore them): a committed step has put
	// them, a step that was not committed has put none. They are not
	// part of the checkpoint's record (History does not return them).
	Memory []MemoryPut
	// Before, when set, are checkpoints of the same thread committed
	// before this one, in order, in the same transaction: the steps a
	// run held back to commit with this one (the first's Parent is the
	// thread's head, each next one's the one before). All are committed
	// or none; a conflict is the first's. Only this one carries Events
	// and Release.
	Before []*Checkpoint
}

// Chain is cp.Before and cp, in the order they are committed.
func (cp *Checkpoint) Chain() []*Checkpoint {
	if len(cp.Before) == 0 {
		return []*Checkpoint{cp}
	}
	return append(slices.Clip(cp.Before), cp)
}

// MemoryPut is one document a step puts in its tenant's memory, as
// Memory.PutMemory writes it.
type MemoryPut struct {
	Tenant string
	Item   *MemoryItem
}

// Source says what wrote a checkpoint.
type Source string

// The sources of checkpoints.
const (
	// SourceCreate: a thread's first checkpoint, its initial values.
	SourceCreate Source = "create"
	// SourceFork: a thread's first checkpoint, copied from a checkpoint of
	// another thread.
	SourceFork Source = "fork"
	// SourceInput: a run's input, applied before its first step.
	SourceInput Source = "input"
	// SourceStep: one superstep of a run.
	SourceStep Source = "step"
	// SourceRun: a whole run, committed when it ended (Exit durability).
	SourceRun Source = "run"
	// SourceUpdate: values written between runs as if a node had written
	// them.
	SourceUpdate Source = "update"
	// SourceBase: the state just before the checkpoints Prune removed.
	SourceBase Source = "base"
	// SourceAbandon: an unfinished run given up; it writes nothing and
	// names no next nodes, so the thread takes new runs again.
	SourceAbandon Source = "abandon"
	// SourceMigrate: the thread moved onto another version of its flow,
	// with the values a migration gave; its Config notes the versions.
	SourceMigrate Source = "migrate"
)

// Write is one changed field.
type Write struct {
	Field string
	// Version counts the field's changes over the thread's life.
	Version uint64
	// Value is the new value; for Append, Items holds the appended items
	// instead.
	Value  any
	Items  []any
	Append bool
	// Removed takes the field out of the state (a thread moved onto a
	// version of its flow that has no such field): it has no value, not
	// a null one.
	Removed bool
}

// Reply is one reply a node was given from outside the run: Node (a
// map's item as NODE[INDEX]) asked for Key (what it sent, hashed: a
// model's request) and was told Text.
type Reply struct {
	Node string `json:"node"`
	Key  string `json:"key"`
	Text string `json:"text"`
}

// NodeWrites names the fields one node wrote in a step.
type NodeWrites struct {
	Node   string
	Fields []string
}

// Snapshot is the full state of a thread at one checkpoint.
type Snapshot struct {
	Thread   string
	Seq      uint64
	Values   map[string]any
	Versions map[string]uint64
	// Next and Joins describe an unfinished run (see Checkpoint).
	Next  []string
	Joins []uint64
	// Run and Step are those of the newest checkpoint.
	Run  string
	Step int
	// Pending holds the saved updates of nodes that completed in the
	// unfinished superstep after this checkpoint, by node.
	Pending map[string][]Write
}

// QuickPending is a Store that can save a pending write without waiting
// for it to be durable (PutPendingQuick, as PutPending otherwise): a
// crash of the store itself (not of its client) soon after may lose it,
// with nothing the store recorded after it, so that the resumed run runs
// the node whose update it held again, as it does one whose update was
// never saved. A store whose every write is durable at once need not be
// one.
type QuickPending interface {
	PutPendingQuick(ctx context.Context, thread string, parent uint64, node string, writes []Write, owner string) error
}

// Store persists threads. Every implementation passes the conformance
// suite in package storetest.
type Store interface {
	// Head returns the thread's newest state, or ErrNotFound.
	Head(ctx context.Context, thread string) (*Snapshot, error)
	// StateAt returns the thread's state as of checkpoint seq.
	StateAt(ctx context.Context, thread string, seq uint64) (*Snapshot, error)
	// Commit appends cp to its thread. A first checkpoint (Parent 0)
	// creates the thread, or fails with ErrExists; its writes hold every
	// initial value. A Parent that is not the head fails with ErrConflict.
	// The store owns cp afterwards; the values it points to are never
	// modified.
	Commit(ctx context.Context, cp *Checkpoint) error
	// History lists the thread's checkpoints, newest first, paged and
	// filtered by opts.
	History(ctx context.Context, thread string, opts HistoryOptions) ([]*Checkpoint, error)
	// Threads lists threads, most recently updated first.
	Threads(ctx context.Context, opts ThreadOptions) ([]ThreadInfo, error)
	// Delete removes a thread and everything the store keeps of it, in
	// one transaction: its checkpoints, pending writes and lease, the
	// threads of the child flows it ran (ids that start with its own and
	// ChildSep), and in a store that keeps a Catalog its record, its runs
	// and their events, and its voice sessions. It fails with ErrBusy,
	// deleting nothing, while the catalog has a queued or running run of
	// it, and with ErrNotFound when the store keeps nothing of it.
	Delete(ctx context.Context, thread string) error
	// PutPending saves the update of a node that completed in the
	// superstep following checkpoint parent, before that superstep is
	// committed. Head returns it in Snapshot.Pending until the next commit.
	// With owner set, it is saved only while the thread's lease names
	// owner (expired or not), and is otherwise refused with ErrLeased,
	// saving nothing: a writer another took the thread from (a killed
	// process whose write was still on its way, one stopped past its
	// lease) cannot add to what the new holder has read. (A checkpoint's
	// commit is fenced by its parent.)
	PutPending(ctx context.Context, thread string, parent uint64, node string, writes []Write, owner string) error
	// Acquire takes the thread's lease for owner for ttl; it fails with
	// ErrLeased while another owner holds an unexpired lease. Acquiring a
	// lease one holds renews it.
	Acquire(ctx context.Context, thread, owner string, ttl time.Duration) error
	// Release gives the lease up, if owner holds it.
	Release(ctx context.Context, thread, owner string) error
	// Prune keeps the thread's newest opts.Keep checkpoints (at least
	// one) and folds the older ones into a base checkpoint (SourceBase)
	// holding the full state just before them; it returns how many
	// checkpoints it removed. The head and any pending writes stay, so a
	// paused run can still resume. States before the base are no longer
	// available.
	//
	// The base is written first, in one transaction; the checkpoints
	// below it are then deleted newest first in transactions of
	// opts.Batch, so that a prune stopped at any point (its context
	// ended, the process killed) leaves every state still listed exact,
	// and the next prune finishes the deletion.
	Prune(ctx context.Context, thread string, opts PruneOptions) (int, error)
	// Close releases the store's resources.
	Close() error
}

// PruneOptions says what Prune keeps and how it reports.
type PruneOptions struct {
	// Keep is how many of the newest checkpoints stay (at least one).
	Keep int
	// Batch is how many checkpoints one transaction deletes (0:
	// DefaultPruneBatch).
	Batch int
	// Progress, when set, is told after each batch how many checkpoints
	// have been removed of how many there are to remove.
	Progress func(removed, total int)
}

// DefaultPruneBatch is the checkpoints one pruning transaction deletes
// when PruneOptions.Batch is 0.
const DefaultPruneBatch = 5000

// DeleteBelow deletes a thread's checkpoints below cut, newest first, in
// batches: del removes those in [lo, hi) and returns how many it removed.
// floor is the lowest checkpoint and total how many there are below
// cut. It stops between batches when ctx ends, returning what it removed.
func DeleteBelow(ctx context.Context, opts PruneOptions, floor, cut uint64, total int, del func(lo, hi uint64) (int, error)) (int, error) {
	batch := uint64(opts.Batch)
	if batch == 0 {
		batch = DefaultPruneBatch
	}
	removed := 0
	for hi := cut; hi > floor; {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		lo := floor
		if hi-floor > batch {
			lo = hi - batch
		}
		n, err := del(lo, hi)
		removed += n
		if err != nil {
			return removed, err
		}
		if opts.Progress != nil {
			opts.Progress(removed, total)
		}
		hi = lo
	}
	return removed, nil
}

// BaseWrites turns a state into the writes of a base checkpoint.
func BaseWrites(s *Snapshot) []Write {
	ws := make([]Write, 0, len(s.Values))
	for _, k := range sortedFields(s.Values) {
		ws = append(ws, Write{Field: k, Version: s.Versions[k], Value: s.Values[k]})
	}
	return ws
}

// HistoryOptions pages and filters History.
type HistoryOptions struct {
	// Before lists only checkpoints older than this sequence number (0: from the newest).
	Before uint64
	// After lists only checkpoints newer than this sequence number.
	After uint64
	// Limit caps the number returned (0: all).
	Limit int
	// Source, Run and Node keep only checkpoints with that source, of that
	// run, or written by that node.
	Source    Source
	Run, Node string
}

// Keep reports whether cp passes the filters.
func (o HistoryOptions) Keep(cp *Checkpoint) bool {
	if o.Before > 0 && cp.Seq >= o.Before || cp.Seq <= o.After {
		return false
	}
	if o.Source != "" && cp.Source != o.Source {
		return false
	}
	if o.Run != "" && cp.Run != o.Run {
		return false
	}
	if o.Node != "" {
		for _, w := range cp.Writers {
			if w.Node == o.Node {
				return true
			}
		}
		return false
	}
	return true
}

// ThreadOptions pages Threads.
type ThreadOptions struct {
	// Limit caps the number returned (0: all).
	Limit int
	// IdleSince keeps only threads not updated since this time.
	IdleSince time.Time
	// Prefix keeps only threads whose id starts with it (the threads of
	// the child flows a thread ran start with its id and ChildSep).
	Prefix string
	// Roots keeps only the threads that are not a child flow's (whose id
	// holds no ChildSep).
	Roots bool
	// After continues a listing after this thread (the last of the
	// previous page): the threads updated before it, or at the same time
	// with a greater id.
	After *ThreadInfo
}

// ChildSep separates a thread's id from the namespace of the thread of a
// child flow it ran (THREAD|NODE:SEQ). Thread ids a person creates cannot
// hold it (CheckThreadID), so a thread's children are the threads whose
// id starts with its own and ChildSep, and a root thread's id holds none.
const ChildSep = "|"

// ChildRecord ends the name of the pending write in which an unfinished
// step records the namespace of a child flow one of its nodes started
// (NODE#flow, or NODE[KEY]#flow for one of a node's several children):
// its value is the namespace, a text, and the child's thread is the
// thread's id, ChildSep and the namespace. The node run again goes on
// with that child, and a fork of the step forks it.
const ChildRecord = "#flow"

// Listed reports whether t passes opts's filters and cursor (not its
// limit).
func (opts ThreadOptions) Listed(t ThreadInfo) bool {
	if !opts.IdleSince.IsZero() && !t.Updated.Before(opts.IdleSince) || !strings.HasPrefix(t.ID, opts.Prefix) ||
		opts.Roots && strings.Contains(t.ID, ChildSep) {
		return false
	}
	if a := opts.After; a != nil {
		return t.Updated.Before(a.Updated) || t.Updated.Equal(a.Updated) && t.ID > a.ID
	}
	return true
}

// ThreadInfo describes one thread.
type ThreadInfo struct {
	ID      string
	Head    uint64
	Created time.Time
	Updated time.Time
}

// Fork copies the state of thread from at checkpoint seq into a new
// thread to, whose history starts there. The fork carries the
// checkpoint's unfinished run: its next nodes, join arrivals, step, the
// run's input and configuration, and (at the thread's head) the updates
// of nodes that completed after it (pending writes), so that resuming the
// fork runs the nodes that were to run there.
func Fork(ctx context.Context, st Store, from string, seq uint64, to string) (*Snapshot, error) {
	return fork(ctx, st, from, seq, to, false)
}

// ForkReplaying forks as Fork does, for a replay: the fork's first
// checkpoint also holds (as its Replies) every model reply the thread it
// is forked from was told, through its own forks and branches, so that
// a run resuming the fork is told them again (engine.Request.Replies)
// and replays the thread with no model.
func ForkReplaying(ctx context.Context, st Store, from string, seq uint64, to string) (*Snapshot, error) {
	return fork(ctx, st, from, seq, to, true)
}

func fork(ctx context.Context, st Store, from string, seq uint64, to string, replay bool) (*Snapshot, error) {
	if err := CheckThreadID(to); err != nil && !isChildOf(to, from) {
		return nil, err
	}
	snap, err := st.StateAt(ctx, from, seq)
	if err != nil {
		return nil, err
	}
	cp := &Checkpoint{Thread: to, Seq: 1, Source: SourceFork, Run: from + "@" + strconv.FormatUint(seq, 10), Time: time.Now()}
	for _, k := range sortedFields(snap.Values) {
		cp.Writes = append(cp.Writes, Write{Field: k, Version: snap.Versions[k], Value: snap.Values[k]})
	}
	var pending map[string][]Write
	if len(snap.Next) > 0 {
		cp.Next, cp.Joins, cp.Step = snap.Next, snap.Joins, snap.Step
		cp.Input, cp.Config = RunInput(ctx, st, from, seq)
		head, err := st.Head(ctx, from)
		if err != nil {
			return nil, err
		}
		if head.Seq == seq {
			pending = head.Pending
		}
	}
	if replay {
		line, err := Lineage(ctx, st, from)
		if err != nil {
			return nil, err
		}
		for _, c := range line {
			cp.Replies = append(cp.Replies, c.Replies...)
		}
	}
	if err := st.Commit(ctx, cp); err != nil {
		return nil, err
	}
	for _, node := range slices.Sorted(maps.Keys(pending)) {
		if err := st.PutPending(ctx, to, 1, node, pending[node], ""); err != nil {
			return nil, fmt.Errorf("fork: the update of node %q: %w", node, err)
		}
		if err := forkChild(ctx, st, from, to, node, pending[node], replay); err != nil {
			return nil, err
		}
	}
	return &Snapshot{Thread: to, Seq: 1, Values: snap.Values, Versions: snap.Versions, Next: cp.Next, Joins: cp.Joins,
		Run: cp.Run, Step: cp.Step, Pending: pending}, nil
}

// isChildOf reports whether to is the thread of a child flow whose fork
// forkChild makes from from: both a child flow's under the same namespace.
func isChildOf(to, from string) bool {
	i, j := strings.Index(to, ChildSep), strings.Index(from, ChildSep)
	return i > 0 && j > 0 && to[i:] == from[j:]
}

// forkChild forks, with the step that started it, the child flow whose
// namespace the pending write of name records (see ChildRecord), at its
// newest checkpoint: the fork's step goes on with the fork's child, which
// carries the child's unfinished run (its questions, its own children).
func forkChild(ctx context.Context, st Store, from, to, name string, ws []Write, replay bool) error {
	if !strings.HasSuffix(name, ChildRecord) || len(ws) != 1 {
		return nil
	}
	ns, ok := ws[0].Value.(string)
	if !ok || ns == "" || strings.Contains(ns, ChildSep) {
		return nil
	}
	child := from + ChildSep + ns
	head, err := st.Head(ctx, child)
	if errors.Is(err, ErrNotFound) {
		return nil // recorded, and not started: the fork starts it
	}
	if err != nil {
		return fmt.Errorf("fork: the child flow %s: %w", child, err)
	}
	if _, err := fork(ctx, st, child, head.Seq, to+ChildSep+ns, replay); err != nil {
		return fmt.Errorf("fork: the child flow %s: %w", child, err)
	}
	return nil
}

// Lineage lists the checkpoints the thread's newest state was made by,
// oldest first: for a fork, those of the thread it was forked from up to
// the checkpoint it was forked at, then its own; for a branch (an update
// at an older checkpoint, see Checkpoint.Base), those up to the
// checkpoint it branched from, then the branch. The checkpoints of a
// thread pruned before are gone: a lineage through them is an error.
func Lineage(ctx context.Context, st Store, thread string) ([]*Checkpoint, error) {
	return lineage(ctx, st, thread, 0)
}

// MaxForkDepth is how many forks back Lineage follows a thread.
const MaxForkDepth = 32

func lineage(ctx context.Context, st Store, thread string, depth int) ([]*Checkpoint, error) {
	if depth > MaxForkDepth {
		return nil, fmt.Errorf("thread %s was forked from forks more than %d deep", thread, MaxForkDepth)
	}
	hist, err := st.History(ctx, thread, HistoryOptions{})
	if err != nil {
		return nil, fmt.Errorf("thread %s: %w", thread, err)
	}
	slices.Reverse(hist)
	var line []*Checkpoint
	for i, cp := range hist {
		switch {
		case i == 0 && cp.Source == SourceFork:
			from, seq, ok := ForkedFrom(cp)
			if !ok {
				return nil, fmt.Errorf("thread %s: its fork names no checkpoint (%q)", thread, cp.Run)
			}
			before, err := lineage(ctx, st, from, depth+1)
			if err != nil {
				return nil, fmt.Errorf("thread %s was forked from %s: %w", thread, from, err)
			}
			cut := slices.IndexFunc(before, func(c *Checkpoint) bool { return c.Thread == from && c.Seq == seq })
			if cut < 0 {
				return nil, fmt.Errorf("thread %s was forked from checkpoint %d of %s, which its lineage does not hold", thread, seq, from)
			}
			line = append(append(line, before[:cut+1]...), cp)
		case cp.Source == SourceBase:
			return nil, fmt.Errorf("thread %s was pruned: its checkpoints before %d are gone", thread, cp.Seq)
		case cp.Base != 0:
			for len(line) > 0 && line[len(line)-1].Thread == thread && line[len(line)-1].Seq > cp.Base {
				line = line[:len(line)-1]
			}
			line = append(line, cp)
		default:
			line = append(line, cp)
		}
	}
	return line, nil
}

// ForkedFrom reads the thread and checkpoint a fork's first checkpoint
// was copied from (its Run is THREAD@SEQ).
func ForkedFrom(cp *Checkpoint) (thread string, seq uint64, ok bool) {
	if cp.Source != SourceFork {
		return "", 0, false
	}
	at := strings.LastIndexByte(cp.Run, '@')
	if at < 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(cp.Run[at+1:], 10, 64)
	return cp.Run[:at], seq, err == nil
}

// RunInput reads the input of the run a thread's checkpoint seq leaves
// unfinished (or ended), and the configuration it recorded: from the
// run's input checkpoint, or from the fork that carried the run into the
// thread (nil when it took none). The run is the one that made the
// checkpoints from seq back to where it began, whichever runs resumed it
// on the way: a run that pauses again after a resume is still the run
// that took the input. Its checkpoints all name nodes still to run (an
// update or a move in between keeps them), so the walk back stops at the
// first that names none: the end of an earlier run, or the thread's
// creation, after which the run took no input.
func RunInput(ctx context.Context, st Store, thread string, seq uint64) (input, config map[string]any) {
	return RunInputWith(ctx, st, nil, thread, seq)
}

// RunInputWith is RunInput, its reads waiting through the store's
// outages as r allows.
func RunInputWith(ctx context.Context, st Store, r *Retrier, thread string, seq uint64) (input, config map[string]any) {
	const page = 64
	for before := seq + 1; before > 1; {
		var cps []*Checkpoint
		err := r.Do(ctx, func(bool) error {
			var err error
			cps, err = st.History(ctx, thread, HistoryOptions{Before: before, Limit: page})
			return err
		})
		if err != nil || len(cps) == 0 {
			return nil, nil
		}
	walk:
		for _, cp := range cps {
			switch cp.Source {
			case SourceInput:
				return inputOf(cp), cp.Config
			case SourceFork:
				return cp.Input, cp.Config
			}
			if cp.Seq != seq && len(cp.Next) == 0 || cp.Source == SourceCreate || cp.Source == SourceBase || cp.Source == SourceAbandon {
				return nil, nil
			}
			before = cp.Seq
			if cp.Base != 0 {
				// a branch goes on from its base, not from the newer
				// checkpoints it was committed after
				before = cp.Base + 1
				break walk
			}
		}
		if len(cps) < page && before == cps[len(cps)-1].Seq {
			return nil, nil
		}
	}
	return nil, nil
}

// inputOf is the input an input checkpoint recorded.
func inputOf(cp *Checkpoint) map[string]any {
	if len(cp.Writes) == 0 {
		return nil
	}
	in := map[string]any{}
	for _, w := range cp.Writes {
		if w.Append {
			in[w.Field] = w.Items
		} else {
			in[w.Field] = w.Value
		}
	}
	// a field whose reducer made another value of its input (add, merge)
	// has the input itself recorded
	maps.Copy(in, cp.Input)
	return in
}

func sortedFields(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Replay folds a thread's checkpoints, oldest first, into a snapshot.
func Replay(thread string, chain []*Checkpoint) *Snapshot {
	f := NewFolder()
	for _, cp := range chain {
		f.Apply(cp)
	}
	return f.Snapshot(thread)
}

// Folder folds checkpoints, oldest first, into a state.
//
// Appends extend a list in place only when the folder allocated that list
// itself; a list that came from a checkpoint (a replaced value) is copied
// on its first append. Snapshots share the folder's lists, so later
// appends write past their length, which they never read.
type Folder struct {
	Values   map[string]any
	Versions map[string]uint64
	Seq      uint64
	Next     []string
	Joins    []uint64
	Run      string
	Step     int
	owned    map[string]bool
}

// NewFolder returns an empty folder.
func NewFolder() *Folder {
	return &Folder{Values: map[string]any{}, Versions: map[string]uint64{}, owned: map[string]bool{}}
}

// Apply folds one checkpoint.
func (f *Folder) Apply(cp *Checkpoint) {
	for _, w := range cp.Writes {
		switch {
		case w.Removed:
			delete(f.Values, w.Field)
			delete(f.owned, w.Field)
		case w.Append:
			cur, _ := f.Values[w.Field].([]any)
			if !f.owned[w.Field] {
				cur = append(make([]any, 0, 2*(len(cur)+len(w.Items))), cur...)
				f.owned[w.Field] = true
			}
			f.Values[w.Field] = append(cur, w.Items...)
		default:
			f.Values[w.Field] = w.Value
			delete(f.owned, w.Field)
		}
		f.Versions[w.Field] = w.Version
	}
	f.Seq, f.Next, f.Joins, f.Run, f.Step = cp.Seq, cp.Next, cp.Joins, cp.Run, cp.Step
}

// Snapshot returns the folded state; its maps are copies, its values shared.
func (f *Folder) Snapshot(thread string) *Snapshot {
	return &Snapshot{Thread: thread, Seq: f.Seq, Values: maps.Clone(f.Values), Versions: maps.Clone(f.Versions),
		Next: f.Next, Joins: f.Joins, Run: f.Run, Step: f.Step}
}
