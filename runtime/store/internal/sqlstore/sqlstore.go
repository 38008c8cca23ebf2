// Package sqlstore holds what the SQL checkpoint stores share: the row
// model, value encoding and the folding of field rows into a state. Each
// checkpoint is one row, holding its writes (see EncodeWrites): each
// changed field's new value, or for an append field only the appended
// items. A field's value at checkpoint N is its newest full write at or
// before N plus the appends after it, so reading a thread touches only
// the rows that make up its current state, and writing a turn costs the
// same on turn 1,000 as on turn 10.
package sqlstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/value"
)

// FieldRow is one stored write.
type FieldRow struct {
	Field   string
	Seq     uint64
	Version uint64
	Append  bool
	Value   []byte // JSON
	// Packed holds a segment's items, packed (see Segment), in place of
	// Value.
	Packed string
	// Removed: the write takes the field out of the state (Value null).
	Removed bool
	// early is the row decoded as it was read (see Loader).
	early *decoded
}

// Encode serialises a write's payload: its value, or its appended items.
func Encode(w store.Write) ([]byte, error) {
	v := w.Value
	if w.Append {
		v = w.Items
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("field %q: %w", w.Field, err)
	}
	return b, nil
}

// Decode parses a stored write, or a segment, back into a store.Write.
func Decode(r FieldRow) (store.Write, error) {
	var v any
	var err error
	if r.Packed != "" {
		v, err = value.Unpack(r.Packed)
	} else {
		v, err = value.Decode(r.Value)
	}
	if err != nil {
		return store.Write{}, fmt.Errorf("field %q at %d: %w", r.Field, r.Seq, err)
	}
	w := store.Write{Field: r.Field, Version: r.Version, Append: r.Append, Removed: r.Removed}
	if r.Append {
		w.Items, _ = v.([]any)
	} else {
		w.Value = v
	}
	return w, nil
}

// A Loader gathers the rows a store reads to build one state. Each packed
// segment starts decoding on the other processors the moment it is read,
// so decoding overlaps the rest of the read; Fold hands the rest to the
// same workers when there is enough of it. A Loader must be closed, or
// folded, once the store is done reading.
type Loader struct {
	rows   []FieldRow
	jobs   chan FieldRow
	wg     sync.WaitGroup
	closed bool
}

// decoded is the result of decoding a row ahead of its fold.
type decoded struct {
	w   store.Write
	err error
}

// Add takes one row read from the store.
func (l *Loader) Add(r FieldRow) {
	if r.Packed != "" {
		l.start()
		l.decode(&r)
	}
	l.rows = append(l.rows, r)
}

// start starts a decoding worker per processor beyond the caller's, once.
func (l *Loader) start() {
	if procs := runtime.GOMAXPROCS(0); procs > 1 && l.jobs == nil && !l.closed {
		l.jobs = make(chan FieldRow, 64)
		for range procs - 1 {
			l.wg.Go(l.work)
		}
	}
}

// decode decodes r on the workers when they run, else at once; the result
// lands in r.early.
func (l *Loader) decode(r *FieldRow) {
	r.early = new(decoded)
	if l.jobs != nil && !l.closed {
		l.jobs <- *r
		return
	}
	r.early.w, r.early.err = Decode(*r)
}

func (l *Loader) work() {
	for r := range l.jobs {
		r.early.w, r.early.err = Decode(r)
	}
}

// Close waits for the decoding under way, the caller taking part.
func (l *Loader) Close() {
	if l.closed {
		return
	}
	l.closed = true
	if l.jobs != nil {
		close(l.jobs)
		l.work()
		l.wg.Wait()
	}
}

// Fold builds the state at checkpoint meta.Seq from the rows, which hold
// for each field its newest full write at or before it (or its first
// append) and everything after.
//
// Consecutive appends to one field are joined into JSON lists of up to
// partBytes and decoded at once: a long conversation costs a decode per
// part, not one per turn. A segment, packed, is a part of its own. When
// there is much to decode, the parts are decoded on all processors; they
// are folded in order all the same.
func (l *Loader) Fold(meta *store.Checkpoint) (*store.Folder, error) {
	rows := l.rows
	SortRows(rows)
	parts := make([]FieldRow, 0, len(rows))
	size := 0
	for i := 0; i < len(rows); {
		r, n := rows[i], 1
		if r.early == nil {
			if r.Append {
				r, n = joinAppends(rows[i:], partBytes)
			}
			size += len(r.Value)
		}
		parts = append(parts, r)
		i += n
	}
	if size >= parallelBytes {
		l.start()
	}
	for i := range parts {
		if parts[i].early == nil {
			l.decode(&parts[i])
		}
	}
	l.Close()
	errs := make([]error, len(parts))
	for i, p := range parts {
		errs[i] = p.early.err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	f := store.NewFolder()
	cp := &store.Checkpoint{Writes: make([]store.Write, 1)}
	for _, p := range parts {
		cp.Writes[0] = p.early.w
		f.Apply(cp)
	}
	f.Seq, f.Next, f.Joins, f.Run, f.Step = meta.Seq, meta.Next, meta.Joins, meta.Run, meta.Step
	return f, nil
}

const (
	// partBytes bounds how much of a field's appends one part joins.
	partBytes = 32 << 10
	// parallelBytes is how much JSON is worth decoding on more than one
	// processor.
	parallelBytes = 128 << 10
)

// joinAppends folds the leading run of append rows of one field into a
// single row whose value lists all their items in order, up to limit
// bytes.
// It returns the row and how many rows it used (just the first when a
// value is not a plain JSON list, which Decode then reports).
func joinAppends(rows []FieldRow, limit int) (FieldRow, int) {
	first := rows[0]
	n := 0
	buf := []byte{'['}
	for _, r := range rows {
		if !r.Append || r.Field != first.Field || r.Packed != "" || n > 0 && len(buf)+len(r.Value) > limit {
			break
		}
		v := bytes.TrimSpace(r.Value)
		if string(v) == "null" { // nil items
			n++
			continue
		}
		if len(v) < 2 || v[0] != '[' || v[len(v)-1] != ']' {
			break
		}
		if inner := bytes.TrimSpace(v[1 : len(v)-1]); len(inner) > 0 {
			if len(buf) > 1 {
				buf = append(buf, ',')
			}
			buf = append(buf, inner...)
		}
		n++
	}
	if n < 2 {
		return first, 1
	}
	last := rows[n-1]
	return FieldRow{Field: first.Field, Seq: last.Seq, Version: last.Version, Append: true, Value: append(buf, ']')}, n
}

// Meta is the stored metadata of a checkpoint.
type Meta struct {
	Writers []store.NodeWrites `json:"writers,omitempty"`
	Next    []string           `json:"next,omitempty"`
	Joins   []uint64           `json:"joins,omitempty"`
	Config  json.RawMessage    `json:"config,omitempty"`
	Input   json.RawMessage    `json:"input,omitempty"`
	Base    uint64             `json:"base,omitempty"`
	Replies []store.Reply      `json:"replies,omitempty"`
	Answers json.RawMessage    `json:"answers,omitempty"`
	// ID is the checkpoint's write id (store.Checkpoint.WriteID).
	ID string `json:"id,omitempty"`
}

// EncodeMeta serialises a checkpoint's writers, next nodes, recorded
// configuration and input, branch, replies, answers and write id.
func EncodeMeta(cp *store.Checkpoint) ([]byte, error) {
	m := Meta{Writers: cp.Writers, Next: cp.Next, Joins: cp.Joins, Base: cp.Base, Replies: cp.Replies, ID: cp.WriteID}
	for _, f := range []struct {
		v   map[string]any
		out *json.RawMessage
	}{{cp.Config, &m.Config}, {cp.Input, &m.Input}, {cp.Answers, &m.Answers}} {
		if len(f.v) > 0 {
			b, err := json.Marshal(f.v)
			if err != nil {
				return nil, err
			}
			*f.out = b
		}
	}
	return json.Marshal(m)
}

// DecodeMeta fills cp's metadata (see EncodeMeta).
func DecodeMeta(b []byte, cp *store.Checkpoint) error {
	var m Meta
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	cp.Writers, cp.Next, cp.Joins, cp.Base, cp.Replies, cp.WriteID = m.Writers, m.Next, m.Joins, m.Base, m.Replies, m.ID
	for _, f := range []struct {
		raw json.RawMessage
		out *map[string]any
	}{{m.Config, &cp.Config}, {m.Input, &cp.Input}, {m.Answers, &cp.Answers}} {
		if len(f.raw) > 0 {
			v, err := value.Decode(f.raw)
			if err != nil {
				return err
			}
			*f.out, _ = v.(map[string]any)
		}
	}
	return nil
}

// Nanos and Time convert checkpoint times to and from stored integers, so
// times round-trip exactly in every database.
func Nanos(t time.Time) int64 { return t.UnixNano() }

// Time is the inverse of Nanos.
func Time(n int64) time.Time { return time.Unix(0, n).UTC() }

type pendingWrite struct {
	Field string          `json:"f"`
	Value json.RawMessage `json:"v"`
}

// EncodePending serialises a node's pending update.
func EncodePending(ws []store.Write) ([]byte, error) {
	out := make([]pendingWrite, len(ws))
	for i, w := range ws {
		b, err := json.Marshal(w.Value)
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", w.Field, err)
		}
		out[i] = pendingWrite{Field: w.Field, Value: b}
	}
	return json.Marshal(out)
}

// DecodePending is the inverse of EncodePending.
func DecodePending(b []byte) ([]store.Write, error) {
	var in []pendingWrite
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	out := make([]store.Write, len(in))
	for i, p := range in {
		v, err := value.Decode(p.Value)
		if err != nil {
			return nil, err
		}
		out[i] = store.Write{Field: p.Field, Value: v}
	}
	return out, nil
}

// Migration is one embedded schema migration, NNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations reads the migrations/*.sql files of fsys in version order.
// Two files of one version are refused: a store records a version as
// applied once, so the second would never run.
func Migrations(fsys fs.FS) ([]Migration, error) {
	files, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	out := make([]Migration, 0, len(files))
	for _, f := range files {
		name := path.Base(f)
		version, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("migration %s: the name must start with its version", name)
		}
		if n := len(out); n > 0 && out[n-1].Version == version {
			return nil, fmt.Errorf("migrations %s and %s: both have version %d", out[n-1].Name, name, version)
		}
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: version, Name: name, SQL: string(body)})
	}
	return out, nil
}

// AttachWrites adds decoded field rows to the checkpoints with their
// sequence numbers; rows of other checkpoints are skipped.
func AttachWrites(cps []*store.Checkpoint, rows []FieldRow) error {
	bySeq := make(map[uint64]*store.Checkpoint, len(cps))
	for _, cp := range cps {
		bySeq[cp.Seq] = cp
	}
	for _, r := range rows {
		cp, ok := bySeq[r.Seq]
		if !ok {
			continue
		}
		w, err := Decode(r)
		if err != nil {
			return err
		}
		cp.Writes = append(cp.Writes, w)
	}
	return nil
}
