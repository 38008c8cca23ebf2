package mapnode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// The crash test: a child process (this test binary) runs a map over 60
// items, four at a time (a second's work), each item logging when it starts; the parent
// kills it with SIGKILL once some items have completed, then starts
// another, which resumes the run. Only the items the first left
// unfinished may run again.

const crashItems = 60

const crashFlow = `version: 1
name: crashmap
input: [items]
state:
  schema:
    type: object
    properties:
      items: {type: array, items: {type: integer}, default: []}
      done: {type: array, items: {type: integer}, default: []}
  reducers:
    done: append
nodes:
  work:
    kind: map
    items: "state.items"
    max_concurrency: 4
    node: {kind: record, set: {done: "item"}}
edges:
  - {from: START, to: work}
  - {from: work, to: END}
`

func init() {
	if addr := os.Getenv("TRELLIS_MAP_CRASH_STORE"); addr != "" {
		os.Exit(crashChild(addr, os.Getenv("TRELLIS_MAP_CRASH_LOG"), os.Getenv("TRELLIS_MAP_CRASH_GEN")))
	}
}

// crashRegistry adds record: a node that logs its start, works a little,
// then writes its set.
func crashRegistry(logPath, gen string) kind.Registry {
	set := registry().(*kind.Set)
	set.Register(kind.Spec{Name: "record", Summary: "Log each execution, then write.", Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
		New: func(b kind.Builder) kind.Node {
			sets := kindtest.CompileSet(b)
			return kind.Func(func(ctx context.Context, s kind.State) (kind.Update, error) {
				item := s.Vars()["item"]
				if f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
					fmt.Fprintf(f, "%s start %v\n", gen, item)
					f.Close()
				}
				select {
				case <-time.After(time.Duration(40+rand.IntN(40)) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return sets.Eval(s.Vars())
			})
		}})
	return set
}

func crashChild(addr, logPath, gen string) int {
	ctx := context.Background()
	st, err := store.Open(ctx, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer st.Close()
	g, dl := flow.LoadSource("crashmap.yaml", []byte(crashFlow), crashRegistry(logPath, gen))
	if g == nil {
		fmt.Fprintln(os.Stderr, dl)
		return 2
	}
	eng := engine.New(st, engine.WithLeaseTTL(300*time.Millisecond))
	req := engine.Request{Thread: "t"}
	if gen == "g1" {
		items := make([]any, crashItems)
		for i := range items {
			items[i] = i
		}
		req.Input = map[string]any{"items": items}
	} else {
		req.Resume = true
	}
	for {
		_, err = eng.Run(ctx, g, req)
		if !errors.Is(err, engine.ErrBusy) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the killed process's lease
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// SIGKILL in the middle of a map: the items that completed were kept as
// pending writes, and the run that resumes it runs exactly the others,
// then folds all sixty in item order. On SQLite and PostgreSQL (the
// memory store dies with its process).
func TestMapCrashResumesOnlyUnfinishedItems(t *testing.T) {
	ctx := context.Background()
	for name, url := range map[string]string{
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "crash.db"),
		"postgres": storetest.Postgres(t),
	} {
		t.Run(name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "execs.log")
			child := func(gen string) *exec.Cmd {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "TRELLIS_MAP_CRASH_STORE="+url, "TRELLIS_MAP_CRASH_LOG="+logPath, "TRELLIS_MAP_CRASH_GEN="+gen)
				cmd.Stderr = os.Stderr
				return cmd
			}
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			first := child("g1")
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			// kill it once some items have completed, long before all have
			deadline := time.Now().Add(30 * time.Second)
			for {
				head, err := st.Head(ctx, "t")
				if err == nil && len(head.Pending) >= 8 {
					break
				}
				if time.Now().After(deadline) {
					first.Process.Kill()
					t.Fatalf("no items completed: %+v %v", head, err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = first.Wait()
			// a commit the killed process had sent may still land (the
			// database finishes a transaction whose COMMIT it received):
			// read what was kept once it no longer changes
			head, err := settledHead(ctx, st, "t")
			if err != nil || !slices.Equal(head.Next, []string{"work"}) {
				t.Fatalf("after the kill: %+v %v", head, err)
			}
			kept := map[int]bool{}
			for key := range head.Pending {
				i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(key, "work["), "]"))
				if err != nil {
					t.Fatalf("pending write %q", key)
				}
				kept[i] = true
			}
			if len(kept) == 0 || len(kept) >= crashItems {
				t.Fatalf("%d items kept: the kill did not land mid-map", len(kept))
			}
			second := child("g2")
			if err := second.Run(); err != nil {
				t.Fatalf("the resuming process: %v", err)
			}
			log, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			var again []int
			for _, line := range strings.Split(strings.TrimSpace(string(log)), "\n") {
				var gen string
				var i int
				if _, err := fmt.Sscanf(line, "%s start %d", &gen, &i); err != nil {
					t.Fatalf("log line %q", line)
				}
				if gen == "g2" {
					again = append(again, i)
				}
			}
			slices.Sort(again)
			var unfinished []int
			for i := range crashItems {
				if !kept[i] {
					unfinished = append(unfinished, i)
				}
			}
			if !slices.Equal(again, unfinished) {
				t.Fatalf("the resumed run ran items %v; the unfinished ones were %v", again, unfinished)
			}
			head, err = st.Head(ctx, "t")
			if err != nil || len(head.Next) > 0 {
				t.Fatalf("after the resume: %+v %v", head, err)
			}
			done := head.Values["done"].([]any)
			for i, v := range done {
				if v != i {
					t.Fatalf("done not in item order: %v", done)
				}
			}
			if len(done) != crashItems {
				t.Fatalf("done has %d items", len(done))
			}
			t.Logf("killed with %d of %d items kept; the resumed run ran %d", len(kept), crashItems, len(again))
		})
	}
}

// settledHead reads a thread's head until two reads a quarter of a second
// apart keep the same pending writes.
func settledHead(ctx context.Context, st store.Store, thread string) (*store.Snapshot, error) {
	head, err := st.Head(ctx, thread)
	for range 40 {
		if err != nil {
			return head, err
		}
		time.Sleep(250 * time.Millisecond)
		again, err2 := st.Head(ctx, thread)
		if err2 != nil {
			return again, err2
		}
		if len(again.Pending) == len(head.Pending) {
			return again, nil
		}
		head = again
	}
	return head, err
}
