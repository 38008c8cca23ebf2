package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/internal/sqlstore"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// TestMain stops the PostgreSQL cluster the tests started, and fails
// them when a goroutine outlives them.
func TestMain(m *testing.M) { os.Exit(storetest.MainNoLeaks(m)) }

// sqliteOpener and postgresOpener open store instances over one database,
// as separate processes would.
func sqliteOpener(tb testing.TB, path string) func() store.Store {
	return opener(tb, sqlite.Open, path)
}

func postgresOpener(tb testing.TB, url string) func() store.Store {
	return opener(tb, postgres.Open, url)
}

func opener[S store.Store](tb testing.TB, open func(context.Context, string) (S, error), dsn string) func() store.Store {
	return func() store.Store {
		st, err := open(context.Background(), dsn)
		if err != nil {
			tb.Fatal(err)
		}
		return st
	}
}

// turnCheckpoints shapes one interview turn the way the interview flow
// commits it: the input, intent detection, the decision, the question and
// finalize_turn appending the exchange to the conversation.
// createCheckpoint creates an interview-shaped thread: empty lists, and
// an interview id.
func createCheckpoint(thread string) *store.Checkpoint {
	return &store.Checkpoint{Thread: thread, Seq: 1, Source: "create", Time: time.Now(),
		Writes: []store.Write{{Field: "conversation_history", Version: 1, Value: []any{}}, {Field: "questions_asked", Version: 1, Value: []any{}},
			{Field: "detected_intents", Version: 1, Value: []any{}}, {Field: "interview_id", Version: 1, Value: "i-1"}}}
}

func turnCheckpoints(thread string, seq uint64, turn int) []*store.Checkpoint {
	answer := strings.Repeat("I worked on the ingestion pipeline and its backpressure. ", 3)
	question := fmt.Sprintf("Question %d: how did you design the part of the system that handled retries?", turn)
	mk := func(step int, node string, writes ...store.Write) *store.Checkpoint {
		seq++
		cp := &store.Checkpoint{Thread: thread, Seq: seq, Parent: seq - 1, Run: fmt.Sprint("run-", turn), Step: step,
			Source: "step", Time: time.Now(), Writes: writes, Next: []string{"next"}}
		if node != "" {
			cp.Writers = []store.NodeWrites{{Node: node, Fields: []string{writes[0].Field}}}
		}
		return cp
	}
	v := uint64(turn)
	return []*store.Checkpoint{
		mk(0, "", store.Write{Field: "last_response", Version: v, Value: answer}),
		mk(1, "detect_intent", store.Write{Field: "detected_intents", Version: v, Append: true,
			Items: []any{map[string]any{"type": "no_intent", "confidence": 0.3, "turn": turn}}}),
		mk(2, "decide_next_action", store.Write{Field: "next_node", Version: v, Value: "question"}),
		mk(3, "question", store.Write{Field: "questions_asked", Version: v, Append: true,
			Items: []any{map[string]any{"id": fmt.Sprint("q", turn), "text": question, "source": "resume", "asked_at_turn": turn}}},
			store.Write{Field: "next_message", Version: v, Value: question}),
		mk(4, "finalize_turn", store.Write{Field: "conversation_history", Version: v, Append: true, Items: []any{
			map[string]any{"role": "candidate", "content": answer, "turn": turn},
			map[string]any{"role": "interviewer", "content": question, "turn": turn, "node": "question"}}},
			store.Write{Field: "turn_count", Version: v, Value: turn}),
	}
}

// payload is what a commit sends: metadata and encoded values.
func payload(cp *store.Checkpoint) int {
	meta, _ := sqlstore.EncodeMeta(cp)
	n := len(meta) + len(cp.Thread) + len(cp.Run) + len(cp.Source) + 40
	for _, w := range cp.Writes {
		b, _ := sqlstore.Encode(w)
		n += len(b) + len(w.Field) + 16
	}
	return n
}

type growth struct {
	// turnNs is the median time of the window's turns (a turn is one
	// interview exchange: five checkpoints), turnMeanNs their mean; the
	// median is what the growth ratio compares, as a single slow commit
	// (a WAL checkpoint, an autovacuum) says nothing about growth.
	turnNs, turnMeanNs, turnBytes, loadNs, coldNs map[int]float64
	walBytes                                      map[int]float64
	// commits times every commit; foldCommits those that also recorded a
	// fold.
	commits, foldCommits []time.Duration
	// foldBytes is what the store wrote into folds and segments over the
	// thread's 1,000 turns: their rows are derived, so they are reported
	// apart from the commits, as bytes per turn over the whole run.
	foldBytes float64
	// longTurns and shortTurns are turns timed alternately once the thread
	// has 1,000 turns: one on it, then one of turns 1..10 on a new thread.
	// Noise from the machine falls on both alike, so their ratio is the
	// growth measure that does not drift with the load over the run.
	longTurns, shortTurns []time.Duration
}

// grow writes turns 1..1000 and measures the turns just before 10, 100
// and 1,000 (ten turns each) and a state load at each mark.
// cold opens another store instance on the same database, as a process
// that has never read the thread would.
func grow(b *testing.B, st store.Store, cold func() store.Store, wal func() int64, derived func(thread string) int64) growth {
	ctx := context.Background()
	thread := fmt.Sprintf("g%d", time.Now().UnixNano())
	if err := st.Commit(ctx, createCheckpoint(thread)); err != nil {
		b.Fatal(err)
	}
	g := growth{turnNs: map[int]float64{}, turnMeanNs: map[int]float64{}, turnBytes: map[int]float64{}, loadNs: map[int]float64{}, coldNs: map[int]float64{}, walBytes: map[int]float64{}}
	marks := map[int]bool{10: true, 100: true, 1000: true}
	seq := uint64(1)
	var windowStart time.Time
	var turns []time.Duration
	var windowBytes int
	var walStart int64
	for turn := 1; turn <= 1000; turn++ {
		inWindow := false
		for m := range marks {
			if turn > m-10 && turn <= m {
				inWindow = true
			}
		}
		if inWindow && (turn-1)%10 == 0 || turn == 1 {
			windowStart, windowBytes, turns = time.Now(), 0, turns[:0]
			if wal != nil {
				walStart = wal()
			}
		}
		turnStart := time.Now()
		for _, cp := range turnCheckpoints(thread, seq, turn) {
			t0 := time.Now()
			if err := st.Commit(ctx, cp); err != nil {
				b.Fatalf("turn %d: %v", turn, err)
			}
			g.commits = append(g.commits, time.Since(t0))
			if cp.Seq%sqlstore.FoldEvery == 0 {
				g.foldCommits = append(g.foldCommits, time.Since(t0))
			}
			windowBytes += payload(cp)
			seq = cp.Seq
		}
		turns = append(turns, time.Since(turnStart))
		if marks[turn] {
			n := float64(min(turn, 10))
			g.turnMeanNs[turn] = float64(time.Since(windowStart).Nanoseconds()) / n
			slices.Sort(turns)
			g.turnNs[turn] = float64(turns[len(turns)/2].Nanoseconds())
			g.turnBytes[turn] = float64(windowBytes) / n
			if wal != nil {
				g.walBytes[turn] = float64(wal()-walStart) / n
			}
			t0 := time.Now()
			const loads = 5
			for range loads {
				snap, err := st.Head(ctx, thread)
				if err != nil {
					b.Fatal(err)
				}
				if got := len(snap.Values["conversation_history"].([]any)); got != 2*turn {
					b.Fatalf("turn %d: conversation has %d messages", turn, got)
				}
			}
			g.loadNs[turn] = float64(time.Since(t0).Nanoseconds()) / loads
			var total time.Duration
			for range loads {
				other := cold()
				t0 := time.Now()
				if _, err := other.Head(ctx, thread); err != nil {
					b.Fatal(err)
				}
				total += time.Since(t0)
				other.Close()
			}
			g.coldNs[turn] = float64(total.Nanoseconds()) / loads
		}
	}
	g.foldBytes = float64(derived(thread)) / 1000
	// alternate: turn 1000+i of the long thread, turn i%10+1 of a short one
	short, shortSeq := "", uint64(0)
	for i := range 100 {
		if i%10 == 0 {
			short = fmt.Sprintf("%s-short%d", thread, i/10)
			if err := st.Commit(ctx, createCheckpoint(short)); err != nil {
				b.Fatal(err)
			}
			shortSeq = 1
		}
		for _, t := range []struct {
			thread string
			seq    *uint64
			turn   int
			into   *[]time.Duration
		}{{thread, &seq, 1001 + i, &g.longTurns}, {short, &shortSeq, i%10 + 1, &g.shortTurns}} {
			t0 := time.Now()
			for _, cp := range turnCheckpoints(t.thread, *t.seq, t.turn) {
				if err := st.Commit(ctx, cp); err != nil {
					b.Fatalf("%s turn %d: %v", t.thread, t.turn, err)
				}
				*t.seq = cp.Seq
			}
			*t.into = append(*t.into, time.Since(t0))
		}
	}
	return g
}

func report(b *testing.B, g growth) {
	for _, m := range []int{10, 100, 1000} {
		b.ReportMetric(g.turnNs[m]/1e3, fmt.Sprintf("µs/turn@%d", m))
		b.ReportMetric(g.turnMeanNs[m]/1e3, fmt.Sprintf("µs/turn-mean@%d", m))
		b.ReportMetric(g.turnBytes[m], fmt.Sprintf("B/turn@%d", m))
		b.ReportMetric(g.loadNs[m]/1e3, fmt.Sprintf("µs/load@%d", m))
		b.ReportMetric(g.coldNs[m]/1e3, fmt.Sprintf("µs/coldload@%d", m))
		if w, ok := g.walBytes[m]; ok {
			b.ReportMetric(w, fmt.Sprintf("walB/turn@%d", m))
		}
	}
	// the commit medians of the first and the last hundred turns (500
	// commits each) show growth without the noise of ten-turn windows
	p50 := func(c []time.Duration) float64 {
		c = slices.Clone(c)
		slices.Sort(c)
		return float64(c[len(c)/2].Nanoseconds())
	}
	first, last := p50(g.commits[:500]), p50(g.commits[len(g.commits)-500:])
	b.ReportMetric(first/1e3, "µs/commit-p50@turns1-100")
	b.ReportMetric(last/1e3, "µs/commit-p50@turns901-1000")
	b.ReportMetric(last/first, "commit-last/first")
	slices.Sort(g.commits)
	b.ReportMetric(float64(g.commits[len(g.commits)/2].Microseconds()), "µs/commit-p50")
	b.ReportMetric(float64(g.commits[len(g.commits)*99/100].Microseconds()), "µs/commit-p99")
	b.ReportMetric(p50(g.foldCommits)/1e3, "µs/fold-commit-p50")
	b.ReportMetric(g.turnBytes[1000]/g.turnBytes[10], "bytes-1000/10")
	b.ReportMetric(g.foldBytes, "fold-B/turn")
	b.ReportMetric(g.turnNs[1000]/g.turnNs[10], "time-1000/10")
	long, short := p50(g.longTurns), p50(g.shortTurns)
	b.ReportMetric(long/1e3, "µs/turn@1000-alternating")
	b.ReportMetric(short/1e3, "µs/turn@10-alternating")
	b.ReportMetric(long/short, "time-1000/10-alternating")
}

// BenchmarkConversationGrowth: go test ./runtime/store -run '^$' -bench Growth -benchtime 1x
func BenchmarkConversationGrowth(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "g.db")
		open := sqliteOpener(b, path)
		st := open()
		defer st.Close()
		var g growth
		for b.Loop() {
			g = grow(b, st, open, nil, func(thread string) int64 {
				db, err := sql.Open("sqlite", path)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				var n int64
				if err := db.QueryRow(`SELECT (SELECT coalesce(sum(length(CAST(items AS BLOB))) + 48*count(*), 0) FROM segments WHERE thread = ?1)
					+ (SELECT coalesce(sum(length(spans)) + 24*count(*), 0) FROM folds WHERE thread = ?1)`, thread).Scan(&n); err != nil {
					b.Fatal(err)
				}
				return n
			})
		}
		report(b, g)
	})
	// the test cluster runs without fsync; durable is PostgreSQL's default,
	// each commit waiting for its WAL to reach the disk
	for _, pg := range []struct {
		name     string
		database func(testing.TB) string
	}{{"postgres", pgtest.Database}, {"postgres-durable", pgtest.DurableDatabase}} {
		b.Run(pg.name, func(b *testing.B) { growPostgres(b, pg.database(b)) })
	}
}

func growPostgres(b *testing.B, url string) {
	open := postgresOpener(b, url)
	st := open()
	defer st.Close()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	wal := func() int64 {
		var n int64
		conn.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n)
		return n
	}
	var g growth
	for b.Loop() {
		g = grow(b, st, open, wal, func(thread string) int64 {
			var n int64
			if err := conn.QueryRow(context.Background(), `SELECT (SELECT coalesce(sum(octet_length(items)) + 48*count(*), 0) FROM segments WHERE thread = $1)
				+ (SELECT coalesce(sum(octet_length(spans)) + 24*count(*), 0) FROM folds WHERE thread = $1)`, thread).Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		})
	}
	report(b, g)
}
