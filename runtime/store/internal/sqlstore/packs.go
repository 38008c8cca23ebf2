package sqlstore

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/trellisflow/trellis/runtime/store"
)

// A pack (store.Catalog.PackEvents) holds a run's kept events in one
// record: a format byte (packFormat), then, compressed with DEFLATE, each
// event as its number and its length (unsigned varints) and its bytes.
// The events of one run repeat their keys, the run's and thread's ids
// and much of the state, so a pack takes a small part of their rows'
// room.
const packFormat = 1

// packWriters keep DEFLATE's compressors for reuse: each holds some
// hundreds of kilobytes of tables, which making one per pack allocated
// and cleared again.
var packWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(io.Discard, flate.BestCompression)
	return w
}}

// EncodePack packs events.
func EncodePack(evs []store.EventRecord) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte(packFormat)
	w := packWriters.Get().(*flate.Writer)
	defer packWriters.Put(w)
	w.Reset(&b)
	var n [2 * binary.MaxVarintLen64]byte
	for _, ev := range evs {
		k := binary.PutUvarint(n[:], uint64(ev.Seq))
		k += binary.PutUvarint(n[k:], uint64(len(ev.Data)))
		if _, err := w.Write(n[:k]); err != nil {
			return nil, err
		}
		if _, err := w.Write(ev.Data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// DecodePack unpacks the events of a pack numbered after after.
func DecodePack(b []byte, after int64) ([]store.EventRecord, error) {
	if len(b) == 0 || b[0] != packFormat {
		return nil, errors.New("decode a run's packed events: not a pack of a known format")
	}
	r := bufio.NewReader(flate.NewReader(bytes.NewReader(b[1:])))
	var out []store.EventRecord
	for {
		seq, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decode a run's packed events: %w", err)
		}
		n, err := binary.ReadUvarint(r)
		if err != nil || n > 1<<30 {
			return nil, fmt.Errorf("decode a run's packed events: event %d: bad length", seq)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, fmt.Errorf("decode a run's packed events: event %d: %w", seq, err)
		}
		if int64(seq) > after {
			out = append(out, store.EventRecord{Seq: int64(seq), Data: data})
		}
	}
}

// mergeEvents joins a run's packed events (packed, unless nil) with its
// rows, in order, at most limit of them.
func mergeEvents(packed []byte, after int64, rows []store.EventRecord, limit int) ([]store.EventRecord, error) {
	if packed == nil {
		return rows, nil
	}
	out, err := DecodePack(packed, after)
	if err != nil {
		return nil, err
	}
	out = append(out, rows...)
	slices.SortStableFunc(out, func(a, b store.EventRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
