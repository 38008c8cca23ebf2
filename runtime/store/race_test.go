package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

const raceRuns = 150

func init() {
	if addr := os.Getenv("TRELLIS_RACE_STORE"); addr != "" {
		os.Exit(raceChild(addr))
	}
}

// raceChild completes raceRuns runs on thread "race", retrying while the
// other process holds the thread.
func raceChild(addr string) int {
	ctx := context.Background()
	st, err := store.Open(ctx, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer st.Close()
	g, dl := flow.Load("testdata/race.yaml", crashKinds(""))
	if g == nil {
		fmt.Fprintln(os.Stderr, dl)
		return 2
	}
	eng := engine.New(st)
	if _, err := eng.Create(ctx, g, "race", nil); err != nil && !errors.Is(err, store.ErrExists) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// start together: say it is ready, then wait for the parent's go
	// file
	if err := os.WriteFile(fmt.Sprintf("%s.ready.%d", os.Getenv("TRELLIS_RACE_GO"), os.Getpid()), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(os.Getenv("TRELLIS_RACE_GO")); err == nil {
			break
		}
	}
	for done := 0; done < raceRuns; {
		_, err := eng.Run(ctx, g, engine.Request{Thread: "race"})
		switch {
		case err == nil:
			done++
			// a pause between turns, as a conversation has, so the other
			// process gets the thread between runs too
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		case errors.Is(err, engine.ErrBusy):
			time.Sleep(time.Millisecond)
		default:
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	return 0
}

func raceTest(t *testing.T, addr string) {
	var cmds []*exec.Cmd
	var errs []*strings.Builder
	goFile := filepath.Join(t.TempDir(), "go")
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TRELLIS_RACE_STORE="+addr, "TRELLIS_RACE_GO="+goFile)
		var b strings.Builder
		cmd.Stderr = &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, errs = append(cmds, cmd), append(errs, &b)
	}
	// both processes are ready (they say so in files of their own)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		ready, err := filepath.Glob(goFile + ".ready.*")
		if err != nil {
			t.Fatal(err)
		}
		if len(ready) == len(cmds) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d processes ready after a minute", len(ready), len(cmds))
		}
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, errs[i])
		}
	}
	st, err := store.Open(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	head, err := st.Head(context.Background(), "race")
	if err != nil {
		t.Fatal(err)
	}
	if head.Values["n"] != 2*raceRuns || head.Values["done"] != 2*raceRuns || len(head.Values["log"].([]any)) != 2*raceRuns {
		t.Fatalf("after %d runs: n %v done %v", 2*raceRuns, head.Values["n"], head.Values["done"])
	}
	hist, err := st.History(context.Background(), "race", store.HistoryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, cp := range hist {
		if i+1 < len(hist) && cp.Parent != hist[i+1].Seq {
			t.Fatalf("chain forked at %d (parent %d, next older %d)", cp.Seq, cp.Parent, hist[i+1].Seq)
		}
		if i > 0 && cp.Run != hist[i-1].Run && seen[cp.Run] {
			t.Fatalf("run %s interleaved with another run at checkpoint %d", cp.Run, cp.Seq)
		}
		seen[cp.Run] = true
	}
	if len(seen) != 2*raceRuns+1 { // the runs and the creation
		t.Fatalf("%d runs in the history", len(seen))
	}
	// run ids start with a per-process prefix: the two processes' runs
	// must alternate in the chain, or they never contended
	switches, prev := 0, ""
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Run == "" {
			continue
		}
		p := hist[i].Run[:strings.IndexByte(hist[i].Run, '-')]
		if prev != "" && p != prev {
			switches++
		}
		prev = p
	}
	t.Logf("the processes took turns %d times over %d runs", switches, 2*raceRuns)
	if switches < 10 {
		t.Fatalf("the processes alternated only %d times: they did not race", switches)
	}
}

func TestRacingProcessesSQLite(t *testing.T) {
	raceTest(t, "sqlite:"+filepath.Join(t.TempDir(), "race.db"))
}

func TestRacingProcessesPostgres(t *testing.T) {
	raceTest(t, pgtest.Database(t))
}

// The same race with both processes behind PgBouncer in transaction
// pooling mode: leases and commits hold with server connections shared.
func TestRacingProcessesPgBouncer(t *testing.T) {
	raceTest(t, pgtest.PooledDatabase(t))
}
