package sqlstore

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/trellisflow/trellis/runtime/store"
)

// A checkpoint's writes are stored in its own row, as one JSON list of
// [field, version, append, value] lists (and a fifth member, true, for a
// write that takes its field out of the state), by field: a row and two index
// entries a write cost more than most values, and the writes of one
// checkpoint are read together but for a fold's reads, which name the
// checkpoints they need (Spans.Checkpoints). No writes is the empty
// string.

// EncodeWrites serialises a checkpoint's writes for its row.
func EncodeWrites(ws []store.Write) ([]byte, error) {
	if len(ws) == 0 {
		return []byte{}, nil
	}
	sorted := slices.SortedFunc(slices.Values(ws), func(a, b store.Write) int { return strings.Compare(a.Field, b.Field) })
	out := []byte{'['}
	for i, w := range sorted {
		v, err := Encode(w)
		if err != nil {
			return nil, err
		}
		f, err := json.Marshal(w.Field)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '[')
		out = append(out, f...)
		out = fmt.Appendf(out, ",%d,%t,", w.Version, w.Append)
		out = append(out, v...)
		if w.Removed {
			// a fifth member: the field is taken out of the state
			out = append(out, ",true"...)
		}
		out = append(out, ']')
	}
	return append(out, ']'), nil
}

// DecodeWrites reads the writes of checkpoint seq from its row, adding
// those keep accepts (all when keep is nil) to rows.
func DecodeWrites(seq uint64, b []byte, keep func(field string) bool, rows []FieldRow) ([]FieldRow, error) {
	if len(b) == 0 {
		return rows, nil
	}
	var ws [][]json.RawMessage
	if err := json.Unmarshal(b, &ws); err != nil {
		return nil, fmt.Errorf("writes of checkpoint %d: %w", seq, err)
	}
	for _, w := range ws {
		var r FieldRow
		if len(w) != 4 && len(w) != 5 {
			return nil, fmt.Errorf("writes of checkpoint %d: a write of %d parts", seq, len(w))
		}
		if err := json.Unmarshal(w[0], &r.Field); err != nil {
			return nil, fmt.Errorf("writes of checkpoint %d: %w", seq, err)
		}
		if keep != nil && !keep(r.Field) {
			continue
		}
		if err := json.Unmarshal(w[1], &r.Version); err != nil {
			return nil, fmt.Errorf("writes of checkpoint %d, field %q: %w", seq, r.Field, err)
		}
		if err := json.Unmarshal(w[2], &r.Append); err != nil {
			return nil, fmt.Errorf("writes of checkpoint %d, field %q: %w", seq, r.Field, err)
		}
		r.Seq, r.Value = seq, w[3]
		if len(w) == 5 {
			if err := json.Unmarshal(w[4], &r.Removed); err != nil {
				return nil, fmt.Errorf("writes of checkpoint %d, field %q: %w", seq, r.Field, err)
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// FromBase leaves out of a thread's rows those before each field's
// newest full write, which the fold would replace.
func FromBase(rows []FieldRow) []FieldRow {
	base := map[string]uint64{}
	for _, r := range rows {
		if !r.Append && r.Seq > base[r.Field] {
			base[r.Field] = r.Seq
		}
	}
	return slices.DeleteFunc(rows, func(r FieldRow) bool { return r.Seq < base[r.Field] })
}

// writeIDs number the write ids NewWriteID gives.
var (
	writeIDPrefix = func() string {
		var b [6]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	writeIDs atomic.Uint64
)

// NewWriteID is a write id (store.Checkpoint.WriteID) for a checkpoint
// given none that a store must recognise: a random prefix of the
// process's and a counter.
func NewWriteID() string {
	return "s" + writeIDPrefix + "." + strconv.FormatUint(writeIDs.Add(1), 36)
}
