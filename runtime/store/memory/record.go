package memory

import (
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// record is one checkpoint of a thread's chain as the store keeps it:
// the parts every step has, and the parts few have behind one pointer.
// It keeps the checkpoint's slices and maps themselves (a checkpoint's
// writer never changes them once committed), not the Checkpoint struct,
// which its writer may use again (store.Copier). History and StateAt
// read the same parts back.
type record struct {
	Seq, Parent uint64
	Run         string
	Step        int
	Time        time.Time
	Writes      []store.Write
	Writers     []store.NodeWrites
	Next        []string
	WriteID     string
	more        *recordMore
}

// recordMore are the parts of a checkpoint that most steps lack.
type recordMore struct {
	source  store.Source
	joins   []uint64
	config  map[string]any
	input   map[string]any
	base    uint64
	replies []store.Reply
	answers map[string]any
	release string
}

// How many records the store allocates at a time: its first chunk holds
// a short run's, the next ones recordChunk.
const (
	firstChunk  = 16
	recordChunk = 64
)

// keep records cp (its Events, Memory and Before aside) on t's chain.
// The records of all threads come from the store's chunks.
func (s *Store) keep(t *thread, cp *store.Checkpoint) {
	if len(s.records) == 0 {
		n := recordChunk
		if s.records == nil {
			n = firstChunk
		}
		s.records = make([]record, n)
	}
	// the chunk's record is zeroed: a part the checkpoint lacks is left
	// unwritten (a pointer written while the collector marks costs a
	// write barrier, a nil one too)
	rec := &s.records[0]
	s.records = s.records[1:]
	rec.Seq, rec.Parent, rec.Run, rec.Step, rec.Time = cp.Seq, cp.Parent, cp.Run, cp.Step, cp.Time
	if cp.Writes != nil {
		rec.Writes = cp.Writes
	}
	if cp.Writers != nil {
		rec.Writers = cp.Writers
	}
	if cp.Next != nil {
		rec.Next = cp.Next
	}
	if cp.WriteID != "" {
		rec.WriteID = cp.WriteID
	}
	if cp.Source != store.SourceStep || cp.Joins != nil || cp.Config != nil || cp.Input != nil || cp.Base != 0 ||
		cp.Replies != nil || cp.Answers != nil || cp.Release != "" {
		rec.more = &recordMore{source: cp.Source, joins: cp.Joins, config: cp.Config, input: cp.Input, base: cp.Base,
			replies: cp.Replies, answers: cp.Answers, release: cp.Release}
	}
	t.chain = append(t.chain, rec)
}

// fill sets cp to the checkpoint rec records on thread.
func (rec *record) fill(cp *store.Checkpoint, thread string) {
	*cp = store.Checkpoint{Thread: thread, Seq: rec.Seq, Parent: rec.Parent, Run: rec.Run, Step: rec.Step, Source: store.SourceStep,
		Time: rec.Time, Writes: rec.Writes, Writers: rec.Writers, Next: rec.Next, WriteID: rec.WriteID}
	if m := rec.more; m != nil {
		cp.Source, cp.Joins, cp.Config, cp.Input, cp.Base = m.source, m.joins, m.config, m.input, m.base
		cp.Replies, cp.Answers, cp.Release = m.replies, m.answers, m.release
	}
}

// replay folds the records of chain, oldest first, into a snapshot (as
// store.Replay folds checkpoints).
func replay(thread string, chain []*record) *store.Snapshot {
	f := store.NewFolder()
	var cp store.Checkpoint
	for _, rec := range chain {
		rec.fill(&cp, thread)
		f.Apply(&cp)
	}
	return f.Snapshot(thread)
}

// CopiesCommits implements store.Copier: a commit records a copy of the
// checkpoint's struct.
func (s *Store) CopiesCommits() store.Store { return s }
