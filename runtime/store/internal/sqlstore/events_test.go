package sqlstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
)

// A batch laid out as rows (EventRows) reads back from them (appendRow)
// as it was, from every number: numbers with gaps or out of order, empty
// data, data with newlines (a row of its own) and without; each row holds
// consecutive numbers, and a run of them without newlines is one row.
func TestEventRowsReadBackAsAppended(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		var evs []store.EventRecord
		seq := int64(r.IntN(3))
		for range r.IntN(12) {
			seq += int64(1 + r.IntN(2)*r.IntN(3))
			if r.IntN(10) == 0 {
				seq -= int64(r.IntN(3))
			}
			var data []byte
			switch r.IntN(4) {
			case 0:
				data = fmt.Appendf(nil, "{\n\"n\": %d}", seq)
			case 1:
			default:
				data = fmt.Appendf(nil, `{"n":%d,"s":"a\\nb"}`, seq)
			}
			evs = append(evs, store.EventRecord{Seq: seq, Data: data})
		}
		rows := EventRows(evs)
		var got []store.EventRecord
		for i, row := range rows {
			var first *int64
			switch {
			case row.First == 0:
			case row.First >= row.Last:
				t.Fatalf("%v: row %d holds %d to %d", evs, i, row.First, row.Last)
			default:
				first = &row.First
			}
			var err error
			if got, err = appendRow(got, first, row.Last, row.Data, -1<<62); err != nil {
				t.Fatalf("%v: row %d: %v", evs, i, err)
			}
		}
		same := slices.EqualFunc(got, evs, func(a, b store.EventRecord) bool { return a.Seq == b.Seq && bytes.Equal(a.Data, b.Data) })
		if !same {
			t.Fatalf("%v read back as %v", evs, got)
		}
		// no two rows that could have been one
		for i := 1; i < len(rows); i++ {
			prev, cur := rows[i-1], rows[i]
			curFirst := cur.First
			if curFirst == 0 {
				curFirst = cur.Last
			}
			if prev.Last > 0 && curFirst == prev.Last+1 && !strings.Contains(prev.Data+cur.Data, "\n") {
				t.Fatalf("%v: rows %+v and %+v could be one", evs, prev, cur)
			}
		}
		// and from every number, the events after it
		if len(evs) > 0 && Ascending(evs) {
			for after := evs[0].Seq - 1; after <= evs[len(evs)-1].Seq; after++ {
				var from []store.EventRecord
				for _, row := range rows {
					var first *int64
					if row.First != 0 {
						first = &row.First
					}
					from, _ = appendRow(from, first, row.Last, row.Data, after)
				}
				want := slices.DeleteFunc(slices.Clone(evs), func(e store.EventRecord) bool { return e.Seq <= after })
				if !slices.EqualFunc(from, want, func(a, b store.EventRecord) bool { return a.Seq == b.Seq && bytes.Equal(a.Data, b.Data) }) {
					t.Fatalf("%v after %d: %v", evs, after, from)
				}
			}
		}
	}
}

// A row whose data do not hold as many events as its numbers say is an
// error, not events made up or lost.
func TestEventRowOfTheWrongLength(t *testing.T) {
	first := int64(3)
	if _, err := appendRow(nil, &first, 5, "{}\n{}", 0); err == nil {
		t.Fatal("a row of events 3 to 5 holding two read without error")
	}
}
