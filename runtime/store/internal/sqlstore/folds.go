package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/trellisflow/trellis/runtime/value"
)

// A long thread is read through folds and segments, so that loading its
// state reads rows in proportion to the state, not to its history.
//
// Every FoldEvery checkpoints the committing transaction records a fold:
// for each field, the sequence number of its newest full write (Base) and
// how far the field's segments reach past it (Chain). A segment joins a
// run of one field's append rows, all after its newest full write, into
// one stored list, packed (see value.Pack); it is made once SegmentRows
// such rows have gathered since the last one. The state at checkpoint T is
// then the newest fold at C <= T, and for each field the row at Base, the
// segments up to Chain, the rows after Chain up to C, and every row after
// C.
//
// Segments duplicate what the write rows hold: the rows stay the record
// of each checkpoint (history, time travel), the segments are a faster way
// to read their sum. Every appended item is written twice, once in its row
// and once in its segment, so the bytes written per turn stay flat.
const (
	FoldEvery   = 64
	SegmentRows = 32
)

// Span locates one field's value at a fold.
type Span struct {
	// Base is the checkpoint of the field's newest full write; 0 when the
	// field has only ever been appended to.
	Base uint64 `json:"b,omitempty"`
	// Chain is the last checkpoint covered by the field's segments after
	// Base; no greater than Base when there are none.
	Chain uint64 `json:"c,omitempty"`
	// Tail counts the append rows after max(Base, Chain).
	Tail int `json:"t,omitempty"`
	// Seqs are the checkpoints of those rows, in order: the stores read
	// rows by checkpoint (see Spans.Checkpoints). A fold recorded before
	// they were kept has none.
	Seqs []uint64 `json:"s,omitempty"`
}

// Spans is a fold: every field's span.
type Spans map[string]Span

// KeyRow is a stored write without its value.
type KeyRow struct {
	Field  string
	Seq    uint64
	Append bool
}

// Range is a run of one field's rows, or of its segments, Lo..Hi
// inclusive.
type Range struct {
	Field  string
	Lo, Hi uint64
}

// DecodeSpans parses a stored fold.
func DecodeSpans(b []byte) (Spans, error) {
	s := Spans{}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return s, nil
}

// Encode serialises a fold.
func (s Spans) Encode() ([]byte, error) { return json.Marshal(s) }

// Advance returns the spans after the rows written since the fold (in
// sequence order within each field).
func (s Spans) Advance(rows []KeyRow) Spans {
	out := make(Spans, len(s))
	for f, sp := range s {
		out[f] = sp
	}
	for _, r := range rows {
		sp := out[r.Field]
		if r.Append {
			sp.Tail++
			sp.Seqs = append(slices.Clip(sp.Seqs), r.Seq)
		} else {
			sp = Span{Base: r.Seq}
		}
		out[r.Field] = sp
	}
	return out
}

// start is the last checkpoint whose rows of the field are read through
// the base row or the segments.
func (sp Span) start() uint64 { return max(sp.Base, sp.Chain) }

// Due lists the fields whose tail has grown to a segment, each with the
// rows to join, up to the fold at c.
func (s Spans) Due(c uint64) []Range {
	var out []Range
	for _, f := range s.fields() {
		if sp := s[f]; sp.Tail >= SegmentRows {
			out = append(out, Range{Field: f, Lo: sp.start() + 1, Hi: c})
		}
	}
	return out
}

// Segmented records that the field's rows up to c now form a segment.
func (s Spans) Segmented(field string, c uint64) {
	sp := s[field]
	s[field] = Span{Base: sp.Base, Chain: c}
}

// Rows lists the rows to read, besides those after the fold at c, to
// build the state at c: each field's base row and the rows after its
// segments.
func (s Spans) Rows(c uint64) []Range {
	out := make([]Range, 0, len(s)+1)
	for _, f := range s.fields() {
		sp := s[f]
		if sp.Chain > sp.Base && sp.Base > 0 {
			out = append(out, Range{Field: f, Lo: sp.Base, Hi: sp.Base})
		}
		lo := max(sp.Base, 1)
		if sp.Chain > sp.Base {
			lo = sp.Chain + 1
		}
		if lo <= c {
			out = append(out, Range{Field: f, Lo: lo, Hi: c})
		}
	}
	return out
}

// Checkpoints lists the checkpoints that hold the rows Rows names: each
// field's base and the checkpoints of its tail, sorted, without repeats.
// It reports false when a span does not know its tail's checkpoints (a
// fold recorded before they were kept).
func (s Spans) Checkpoints() ([]uint64, bool) {
	var out []uint64
	for _, sp := range s {
		if len(sp.Seqs) != sp.Tail {
			return nil, false
		}
		if sp.Base > 0 {
			out = append(out, sp.Base)
		}
		out = append(out, sp.Seqs...)
	}
	slices.Sort(out)
	return slices.Compact(out), true
}

// Segments lists, per field, the range of checkpoints its segments cover.
func (s Spans) Segments() []Range {
	var out []Range
	for _, f := range s.fields() {
		if sp := s[f]; sp.Chain > sp.Base {
			out = append(out, Range{Field: f, Lo: sp.Base + 1, Hi: sp.Chain})
		}
	}
	return out
}

func (s Spans) fields() []string {
	fs := make([]string, 0, len(s))
	for f := range s {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	return fs
}

// Segment joins the items of a field's append rows, in order, into the
// value of the segment they form: one list, packed (see value.Pack), as
// segments are read far more often than they are written.
func Segment(rows []FieldRow) ([]byte, error) {
	r, n := joinAppends(rows, math.MaxInt)
	if n != len(rows) {
		return nil, fmt.Errorf("field %q at %d: a row to join is not an appended JSON list", rows[n].Field, rows[n].Seq)
	}
	items, err := value.Decode(r.Value)
	if err != nil {
		return nil, fmt.Errorf("field %q at %d: %w", r.Field, r.Seq, err)
	}
	return value.Pack(nil, items)
}

// SortRows orders rows by field, then sequence, as Fold reads them.
func SortRows(rows []FieldRow) {
	slices.SortFunc(rows, func(a, b FieldRow) int {
		if c := strings.Compare(a.Field, b.Field); c != 0 {
			return c
		}
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}

// FoldTx is what recording a fold needs of a store's write transaction.
type FoldTx interface {
	// LastFold returns the newest fold at or before seq; 0 and nil spans
	// when there is none.
	LastFold(ctx context.Context, thread string, seq uint64) (uint64, []byte, error)
	// Keys lists the rows after one checkpoint up to another, by field,
	// then sequence.
	Keys(ctx context.Context, thread string, after, upto uint64) ([]KeyRow, error)
	// Rows reads the rows of the listed checkpoints.
	Rows(ctx context.Context, thread string, seqs []uint64) ([]FieldRow, error)
	PutSegment(ctx context.Context, thread string, r Range, version uint64, items []byte) error
	PutFold(ctx context.Context, thread string, seq uint64, spans []byte) error
}

// RecordFold records the fold at checkpoint c from the previous one and
// the rows written since, making segments of the fields whose tails have
// grown long enough. Without a previous fold (a young thread, or one just
// pruned) it starts from the thread's first row.
func RecordFold(ctx context.Context, tx FoldTx, thread string, c uint64) error {
	prev, stored, err := tx.LastFold(ctx, thread, c-1)
	if err != nil {
		return err
	}
	keys, err := tx.Keys(ctx, thread, prev, c)
	if err != nil {
		return err
	}
	p, err := PlanFold(c, stored, keys)
	if err != nil {
		return err
	}
	var rows []FieldRow
	if len(p.Due) > 0 {
		if rows, err = tx.Rows(ctx, thread, p.DueCheckpoints()); err != nil {
			return err
		}
	}
	spans, segs, err := p.Finish(p.DueRows(rows))
	if err != nil {
		return err
	}
	for _, g := range segs {
		if err := tx.PutSegment(ctx, thread, g.Range, g.Version, g.Items); err != nil {
			return err
		}
	}
	return tx.PutFold(ctx, thread, c, spans)
}

// A FoldPlan is the fold being recorded at checkpoint C: the previous
// fold's spans advanced over the rows written since, and the ranges of
// rows due to be joined into segments. A store reads the due rows and
// hands them to Finish, in as few round trips as it can.
type FoldPlan struct {
	C     uint64
	Spans Spans
	Due   []Range
}

// PlanFold plans the fold at c from the stored spans of the newest fold
// before it (nil when there is none) and the keys of the rows written
// after that fold, up to c.
func PlanFold(c uint64, stored []byte, keys []KeyRow) (*FoldPlan, error) {
	s := Spans{}
	if stored != nil {
		var err error
		if s, err = DecodeSpans(stored); err != nil {
			return nil, err
		}
	}
	s = s.Advance(keys)
	return &FoldPlan{C: c, Spans: s, Due: s.Due(c)}, nil
}

// DueCheckpoints lists the checkpoints that hold the rows due to be
// joined into segments: those the spans name, or every checkpoint of a
// due range whose span does not name them (a fold recorded before they
// were kept).
func (p *FoldPlan) DueCheckpoints() []uint64 {
	var out []uint64
	for _, r := range p.Due {
		if sp := p.Spans[r.Field]; len(sp.Seqs) == sp.Tail {
			out = append(out, sp.Seqs...)
			continue
		}
		for seq := r.Lo; seq <= r.Hi; seq++ {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// DueRows keeps of rows those of the due ranges.
func (p *FoldPlan) DueRows(rows []FieldRow) []FieldRow {
	return slices.DeleteFunc(rows, func(r FieldRow) bool {
		return !slices.ContainsFunc(p.Due, func(d Range) bool { return d.Field == r.Field && r.Seq >= d.Lo && r.Seq <= d.Hi })
	})
}

// A NewSegment is a segment to store: the rows of Range joined, packed,
// with the version of the last.
type NewSegment struct {
	Range
	Version uint64
	Items   []byte
}

// Finish joins the rows of the due ranges (in any order) into segments
// and returns them with the fold's encoded spans.
func (p *FoldPlan) Finish(rows []FieldRow) (spans []byte, segs []NewSegment, err error) {
	SortRows(rows)
	for _, r := range p.Due {
		lo, _ := slices.BinarySearchFunc(rows, r.Field, func(row FieldRow, f string) int { return strings.Compare(row.Field, f) })
		hi := lo
		for hi < len(rows) && rows[hi].Field == r.Field {
			hi++
		}
		if lo == hi {
			return nil, nil, fmt.Errorf("fold at %d: no rows of field %q to join for checkpoints %d-%d", p.C, r.Field, r.Lo, r.Hi)
		}
		items, err := Segment(rows[lo:hi])
		if err != nil {
			return nil, nil, err
		}
		segs = append(segs, NewSegment{Range: r, Version: rows[hi-1].Version, Items: items})
		p.Spans.Segmented(r.Field, p.C)
	}
	spans, err = p.Spans.Encode()
	return spans, segs, err
}
