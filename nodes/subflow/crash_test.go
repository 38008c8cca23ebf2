package subflow_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/all/alltest"
	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// The crash test of a pause two subflows down: a process (this test
// binary) runs the hiring flow until the check in the review asks, and
// is killed (SIGKILL) as it waits; a second process answers, and is
// killed in the middle of the review's judge, after the check finished; a
// third resumes the thread and completes it. Each gate logs its runs to
// a side file: every node ran once, but the judge the kill interrupted.

func init() {
	if addr := os.Getenv("TRELLIS_PAUSE_STORE"); addr != "" {
		os.Exit(pauseProcess(addr))
	}
}

// loggedKinds has gate log each run of a node (its start, and its end
// when it returns) to logPath, and block at the node named block.
func loggedKinds(logPath, block string) kind.Registry {
	set := alltest.WithTestKinds()
	logf := func(format string, args ...any) {
		if f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, format+"\n", args...)
			f.Close()
		}
	}
	set.Register(kind.Spec{Name: "gate", Summary: "Log each run; block at one node.", Fields: []config.Field{config.Map("set", "Field to expression.", nil)},
		New: func(b kind.Builder) kind.Node {
			sets := kindtest.CompileSet(b)
			name := b.Node()
			return kind.Func(func(ctx context.Context, s kind.State) (kind.Update, error) {
				logf("start %s", name)
				if name == block {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				u, err := sets.Eval(s.Vars())
				if err == nil {
					logf("end %s", name)
				}
				return u, err
			})
		}})
	return set
}

// pauseStep is one process's part: "start" runs the flow until it pauses
// and prints the question's path, "answer" answers it by its path,
// "resume" resumes the thread; each prints the run's end.
func pauseStep(ctx context.Context, st store.Store, dir, mode, block string, out *os.File) error {
	g, dl := flow.Load(filepath.Join(dir, "hiring.yaml"), loggedKinds(filepath.Join(dir, "runs.log"), block))
	if g == nil || dl.HasErrors() {
		return fmt.Errorf("load: %v", dl)
	}
	eng := engine.New(st, engine.WithLeaseTTL(300*time.Millisecond))
	req := engine.Request{Thread: "cand"}
	switch mode {
	case "start":
		req.Input = map[string]any{"resume": "go"}
	case "answer":
		req.Resume, req.Answers = true, map[string]any{"review/inner/approve": "yes"}
	default:
		req.Resume = true
	}
	for {
		res, err := eng.Run(ctx, g, req)
		switch {
		case errors.Is(err, engine.ErrBusy):
			time.Sleep(50 * time.Millisecond) // a killed process's lease
			continue
		case err != nil:
			return err
		case res.Interrupt != nil:
			for _, a := range res.Interrupt.Asks {
				fmt.Fprintf(out, "paused %s\n", a.Path)
			}
		default:
			b, _ := json.Marshal(res.State)
			fmt.Fprintf(out, "ended %s\n", b)
		}
		return nil
	}
}

func pauseProcess(addr string) int {
	ctx := context.Background()
	st, err := store.Open(ctx, addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer st.Close()
	if err := pauseStep(ctx, st, os.Getenv("TRELLIS_PAUSE_DIR"), os.Getenv("TRELLIS_PAUSE_MODE"), os.Getenv("TRELLIS_PAUSE_BLOCK"), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// the process waits, as one that asked a person does, until killed
	for {
		time.Sleep(time.Hour)
	}
}

// TestPauseTwoSubflowsDownSurvivesKills runs the three processes on
// SQLite and PostgreSQL, killing the first two; on the memory store,
// which lives in its process, the three are engines of this one, the
// second given up by cancelling its context.
func TestPauseTwoSubflowsDownSurvivesKills(t *testing.T) {
	ctx := context.Background()
	for name, url := range storetest.URLs(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for file, src := range map[string]string{"hiring.yaml": pauseRoot, "review.yaml": pauseReview, "check.yaml": pauseCheck} {
				write(t, dir, file, src)
			}
			logPath := filepath.Join(dir, "runs.log")
			started := func(node string) bool {
				b, _ := os.ReadFile(logPath)
				return strings.Contains(string(b), "start "+node+"\n")
			}
			var last string
			if name == "memory" {
				st, err := store.Open(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				out := filepath.Join(dir, "out")
				f, _ := os.Create(out)
				if err := pauseStep(ctx, st, dir, "start", "", f); err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithCancel(ctx)
				go func() {
					for !started("judge") {
						time.Sleep(5 * time.Millisecond)
					}
					cancel()
				}()
				if err := pauseStep(cctx, st, dir, "answer", "judge", f); !errors.Is(err, context.Canceled) {
					t.Fatalf("the answering engine: %v", err)
				}
				if err := pauseStep(ctx, st, dir, "resume", "", f); err != nil {
					t.Fatal(err)
				}
				f.Close()
				b, _ := os.ReadFile(out)
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) != 2 || lines[0] != "paused review/inner/approve" {
					t.Fatalf("out: %q", lines)
				}
				last = lines[1]
			} else {
				process := func(mode, block string) (*exec.Cmd, *bufio.Scanner) {
					cmd := exec.Command(os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), "TRELLIS_PAUSE_STORE="+url, "TRELLIS_PAUSE_DIR="+dir, "TRELLIS_PAUSE_MODE="+mode, "TRELLIS_PAUSE_BLOCK="+block)
					cmd.Stderr = os.Stderr
					stdout, err := cmd.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					return cmd, bufio.NewScanner(stdout)
				}
				kill := func(cmd *exec.Cmd) {
					if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
					_ = cmd.Wait()
				}
				// the first asks, and is killed as it waits
				first, out := process("start", "")
				if !out.Scan() || out.Text() != "paused review/inner/approve" {
					kill(first)
					t.Fatalf("the first process: %q %v", out.Text(), out.Err())
				}
				kill(first)
				// the second answers, and is killed inside the judge
				second, _ := process("answer", "judge")
				deadline := time.Now().Add(2 * time.Minute) // against a hang only
				for !started("judge") {
					if time.Now().After(deadline) {
						kill(second)
						t.Fatal("the second process never reached the judge")
					}
					time.Sleep(5 * time.Millisecond)
				}
				kill(second)
				// the third resumes and completes
				third, out := process("resume", "")
				if !out.Scan() {
					kill(third)
					t.Fatalf("the third process: %v", out.Err())
				}
				last = out.Text()
				kill(third)
			}
			var state map[string]any
			if rest, ok := strings.CutPrefix(last, "ended "); !ok || json.Unmarshal([]byte(rest), &state) != nil {
				t.Fatalf("the last run: %q", last)
			}
			want := []any{"prepared go", "read go", "judged yes (signed)", "closed: yes (signed)"}
			if !reflect.DeepEqual(state["log"], want) || state["verdict"] != "yes (signed)" {
				t.Fatalf("state %v", state)
			}
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				counts[line]++
			}
			wantCounts := map[string]int{}
			for _, n := range []string{"prepare", "read", "scan", "sign", "close"} {
				wantCounts["start "+n], wantCounts["end "+n] = 1, 1
			}
			// the judge ran to its end once, after the one the kill cut
			wantCounts["start judge"], wantCounts["end judge"] = 2, 1
			if !reflect.DeepEqual(counts, wantCounts) {
				t.Fatalf("runs %v, want %v", counts, wantCounts)
			}
		})
	}
}
