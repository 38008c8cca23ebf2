package sqlstore

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/trellisflow/trellis/runtime/store"
)

// Folding joins a field's consecutive append rows into one decode; the
// state must be exactly what decoding each row on its own gives, whatever
// the rows hold and however they are spaced.
func TestFoldJoinsAppendsLikeSeparateDecodes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	procs := max(runtime.GOMAXPROCS(0), 2)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var value func(depth int) any
	value = func(depth int) any {
		switch r.IntN(7) {
		case 0:
			return []int{r.IntN(10), r.IntN(2000) - 1000}[r.IntN(2)]
		case 1:
			return r.Float64()*100 + 0.5
		case 2:
			return []string{"", ",", "]", "[", `"`, "é😀", "a, b]", "{}"}[r.IntN(8)]
		case 3:
			return nil
		case 4:
			if depth < 3 {
				l := make([]any, r.IntN(3))
				for i := range l {
					l[i] = value(depth + 1)
				}
				return l
			}
		case 5:
			if depth < 3 {
				return map[string]any{"k": value(depth + 1), "]": value(depth + 1)}
			}
		}
		return r.IntN(2) == 0
	}
	for round := range 200 {
		var rows []FieldRow
		seq := uint64(1)
		for _, field := range []string{"a", "b", "c"} {
			if r.IntN(2) == 0 {
				b, _ := json.Marshal([]any{value(0)})
				rows = append(rows, FieldRow{Field: field, Seq: seq, Version: seq, Value: b})
				seq++
			}
			for range r.IntN(6) {
				items := make([]any, r.IntN(3))
				for i := range items {
					items[i] = value(0)
				}
				b, _ := json.Marshal(items)
				if r.IntN(3) == 0 { // stores may space their JSON
					b = []byte(" " + strings.ReplaceAll(string(b), ",", ", ") + "\n")
				}
				row := FieldRow{Field: field, Seq: seq, Version: seq, Append: true, Value: b}
				if r.IntN(3) == 0 { // a segment
					packed, err := Segment([]FieldRow{row})
					if err != nil {
						t.Fatal(err)
					}
					row.Value, row.Packed = nil, string(packed)
				}
				rows = append(rows, row)
				seq++
			}
		}
		// the loader takes rows in any order, and segments decode early
		// (on one processor: in the fold)
		runtime.GOMAXPROCS(map[bool]int{true: 1, false: procs}[round%4 == 0])
		var l Loader
		for _, i := range r.Perm(len(rows)) {
			l.Add(rows[i])
		}
		got, err := l.Fold(&store.Checkpoint{Seq: seq})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		want := store.NewFolder()
		for _, row := range rows {
			w, err := Decode(row)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			want.Apply(&store.Checkpoint{Writes: []store.Write{w}})
		}
		if !reflect.DeepEqual(got.Values, want.Values) || !reflect.DeepEqual(got.Versions, want.Versions) {
			t.Fatalf("round %d: joined fold %v %v\nseparate %v %v\nrows %s", round, got.Values, got.Versions, want.Values, want.Versions, fmt.Sprint(rows))
		}
	}
}

// A fold names the checkpoints of every row a load reads up to it: each
// field's base and its tail, which a segment or a full write empties; one
// recorded before they were kept says it cannot.
func TestSpansCheckpoints(t *testing.T) {
	keys := []KeyRow{{Field: "log", Seq: 1}, {Field: "log", Seq: 3, Append: true}, {Field: "log", Seq: 5, Append: true},
		{Field: "n", Seq: 2}, {Field: "n", Seq: 4}, {Field: "notes", Seq: 5, Append: true}}
	s := Spans{}.Advance(keys)
	if got, ok := s.Checkpoints(); !ok || !reflect.DeepEqual(got, []uint64{1, 3, 4, 5}) {
		t.Fatalf("checkpoints %v %v", got, ok)
	}
	s.Segmented("log", 5)
	s = s.Advance([]KeyRow{{Field: "log", Seq: 7, Append: true}, {Field: "notes", Seq: 6}})
	if got, ok := s.Checkpoints(); !ok || !reflect.DeepEqual(got, []uint64{1, 4, 6, 7}) {
		t.Fatalf("checkpoints after a segment and a full write %v %v", got, ok)
	}
	if _, ok := (Spans{"log": {Base: 1, Tail: 2}}).Checkpoints(); ok {
		t.Fatal("spans kept without their tails' checkpoints name them")
	}
}

// Two migrations of one version would leave the second unapplied (a
// store records a version once): they are refused, naming both.
func TestMigrationsRefuseASharedVersion(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/001_a.sql": {Data: []byte("SELECT 1;")},
		"migrations/002_b.sql": {Data: []byte("SELECT 2;")},
		"migrations/002_c.sql": {Data: []byte("SELECT 3;")},
	}
	_, err := Migrations(fsys)
	if err == nil || !strings.Contains(err.Error(), "002_b.sql and 002_c.sql") {
		t.Fatalf("err = %v, want the two files of version 2 named", err)
	}
	delete(fsys, "migrations/002_c.sql")
	ms, err := Migrations(fsys)
	if err != nil || len(ms) != 2 || ms[1].Version != 2 {
		t.Fatalf("migrations = %v, %v", ms, err)
	}
}
