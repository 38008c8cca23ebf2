package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/memory"
)

// The crash test: a child process (this test binary) runs the crash flow
// for crashTurns turns; the parent kills it with SIGKILL at random moments
// and starts a new one, which resumes the thread. The record nodes append
// every execution to a side file before returning.

const crashTurns = 30

func init() {
	if addr := os.Getenv("TRELLIS_CRASH_STORE"); addr != "" {
		os.Exit(crashChild(addr, os.Getenv("TRELLIS_CRASH_LOG")))
	}
}

// crashKinds: calc evaluates expressions inline; record is a blocking node
// that sleeps a little, records its execution, and returns its update
// with its execution id.
func crashKinds(logPath string) kind.Registry {
	return kind.NewSet(
		kind.Spec{Name: "calc", Summary: "Expressions to fields.", Inline: true, Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
			New: func(b kind.Builder) kind.Node {
				sets := kindtest.CompileSet(b)
				return kind.Func(func(_ context.Context, s kind.State) (kind.Update, error) { return sets.Eval(s.Vars()) })
			}},
		kind.Spec{Name: "record", Summary: "Record each execution.", Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
			New: func(b kind.Builder) kind.Node {
				sets := kindtest.CompileSet(b)
				b.Writes("execs", config.Value{})
				name := b.Node()
				return kind.Func(func(ctx context.Context, s kind.State) (kind.Update, error) {
					select {
					case <-time.After(time.Duration(500+rand.IntN(2500)) * time.Microsecond):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					u, err := sets.Eval(s.Vars())
					if err != nil {
						return nil, err
					}
					id := fmt.Sprintf("%s/%v/%v/%s", name, s.Get("turn"), s.Get("round"), expression.NewID()[:8])
					if logPath != "" {
						f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
						if err != nil {
							return nil, err
						}
						_, err = f.WriteString("exec " + id + "\n")
						f.Close()
						if err != nil {
							return nil, err
						}
					}
					return append(u, kind.FieldValue{Field: "execs", Value: []any{id}}), nil
				})
			}},
	)
}

func crashGraph(t testing.TB, logPath string) *flow.Graph {
	g, dl := flow.Load("testdata/crash.yaml", crashKinds(logPath))
	if g == nil {
		if t == nil {
			panic(fmt.Sprint(dl))
		}
		t.Fatal(dl)
	}
	return g
}

func note(logPath, line string) {
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		f.WriteString(line + "\n")
		f.Close()
	}
}

// crashChild drives the thread to crashTurns finished turns, resuming an
// unfinished run first.
func crashChild(addr, logPath string) int {
	ctx := context.Background()
	st, err := store.Open(ctx, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer st.Close()
	g := crashGraph(nil, logPath)
	eng := engine.New(st, engine.WithLeaseTTL(150*time.Millisecond))
	for {
		head, err := st.Head(ctx, "t")
		if errors.Is(err, store.ErrNotFound) {
			if _, err := eng.Create(ctx, g, "t", nil); err != nil && !errors.Is(err, store.ErrExists) {
				fmt.Fprintln(os.Stderr, err)
				return 2
			}
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		req := engine.Request{Thread: "t"}
		switch {
		case len(head.Next) > 0:
			req.Resume = true
			note(logPath, fmt.Sprintf("resume pending=%d", len(head.Pending)))
		case head.Values["turn"].(int) < crashTurns:
			req.Input = map[string]any{"turn": head.Values["turn"].(int) + 1}
		default:
			return 0
		}
		if _, err := eng.Run(ctx, g, req); err != nil {
			if errors.Is(err, engine.ErrBusy) {
				time.Sleep(20 * time.Millisecond) // the killed process's lease
				continue
			}
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
}

func crashTest(t *testing.T, addr string, kills int) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "side.log")
	killed, exits := 0, 0
	for {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TRELLIS_CRASH_STORE="+addr, "TRELLIS_CRASH_LOG="+logPath)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if killed < kills {
			// let the child start working (its first execution reaches
			// the side log), then kill it at a random moment
			size := logSize(logPath)
			for deadline := time.Now().Add(30 * time.Second); logSize(logPath) == size && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
			cmd.Process.Signal(syscall.SIGKILL)
			err := cmd.Wait()
			if err == nil {
				exits++ // finished before the kill; start over below
				if exits > 3 {
					t.Fatalf("the job finished before %d kills (only %d)", kills, killed)
				}
				break
			}
			killed++
			continue
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("final child: %v\n%s", err, stderr.String())
		}
		break
	}
	st, err := store.Open(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Head(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	// the crash-free state, each execution committed once, and (from the
	// side log) none executed again after the one that was committed
	committed := uninterrupted(t, got, crashTurns)
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	last := map[string]string{}
	resumes, withPending, reruns := 0, 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "exec "):
			id := strings.TrimPrefix(line, "exec ")
			key := id[:strings.LastIndexByte(id, '/')]
			if _, seen := last[key]; seen {
				reruns++
			}
			last[key] = id
		case strings.HasPrefix(line, "resume"):
			resumes++
			if !strings.HasSuffix(line, "pending=0") {
				withPending++
			}
		}
	}
	for key, id := range committed {
		if last[key] != id {
			t.Errorf("%s ran again after its committed execution %s (last: %s)", key, id, last[key])
		}
	}
	t.Logf("%d kills, %d resumed runs (%d with pending writes), %d executions re-run that had not completed", killed, resumes, withPending, reruns)
	if resumes == 0 || withPending == 0 {
		t.Errorf("the kills never interrupted a run with saved pending writes (%d resumes, %d with pending)", resumes, withPending)
	}
}

// uninterrupted checks a thread of the crash flow after turns turns
// against the state a run with no failure reaches, and that every logical
// execution (node, turn, round) was committed exactly once. It returns
// the committed execution of each.
func uninterrupted(t *testing.T, got *store.Snapshot, turns int) map[string]string {
	t.Helper()
	ref := engine.New(memory.New())
	g := crashGraph(t, "")
	for turn := 1; turn <= turns; turn++ {
		if _, err := ref.Run(context.Background(), g, engine.Request{Thread: "t", Input: map[string]any{"turn": turn}}); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := ref.Store.Head(context.Background(), "t")
	for _, f := range []string{"turn", "round", "log", "total"} {
		if !reflect.DeepEqual(got.Values[f], want.Values[f]) {
			t.Errorf("%s:\n%v\nwant\n%v", f, got.Values[f], want.Values[f])
		}
	}
	committed := map[string]string{}
	for _, e := range got.Values["execs"].([]any) {
		id := e.(string)
		key := id[:strings.LastIndexByte(id, '/')]
		if prev, dup := committed[key]; dup {
			t.Errorf("%s committed twice: %s and %s", key, prev, id)
		}
		committed[key] = id
	}
	if len(committed) != turns*6*3 {
		t.Errorf("%d committed executions, want %d", len(committed), turns*6*3)
	}
	return committed
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func TestCrashRecoverySQLite(t *testing.T) {
	crashTest(t, "sqlite:"+filepath.Join(t.TempDir(), "crash.db"), 50)
}

func TestCrashRecoveryPostgres(t *testing.T) {
	crashTest(t, pgtest.Database(t), 50)
}

// Crash recovery behind PgBouncer in transaction pooling mode, where a
// killed client's unfinished transaction sits on a server connection the
// pooler shares.
func TestCrashRecoveryPgBouncer(t *testing.T) {
	crashTest(t, pgtest.PooledDatabase(t), 50)
}
