package pgtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// helperEnv makes the test binary, run again by
// TestServersEndWithTheTestBinary, the test binary that starts servers
// and ends as the variable says.
const helperEnv = "TRELLIS_PGTEST_HELPER"

// The shared cluster, PgBouncer before it, and a test's own cluster end
// with the test binary that started them, however it ends: a test that
// fails (TestMain stops them), a test that panics, the binary killed with
// SIGKILL. Another run of this test binary starts them, says where they
// are, and ends; then the kernel is asked whether the servers' processes
// are still there (kill(pid, 0)), and the file system whether their
// directories are.
func TestServersEndWithTheTestBinary(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		return
	}
	for _, how := range []string{"fail", "panic", "kill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartsServers$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), helperEnv+"="+how)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// the helper prints "server PID DIR" for each server it
			// started, then "started"
			type left struct {
				pid int
				dir string
			}
			var servers []left
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				line := lines.Text()
				if line == "started" {
					break
				}
				var l left
				if _, err := fmt.Sscanf(line, "server %d %s", &l.pid, &l.dir); err == nil {
					servers = append(servers, l)
					// whatever this test concludes, nothing it made outlives it
					t.Cleanup(func() {
						if running(l.pid) {
							_ = syscall.Kill(l.pid, syscall.SIGQUIT)
						}
						os.RemoveAll(l.dir)
					})
				}
			}
			if len(servers) != 3 {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the helper told of %d servers, want 3 (the cluster, PgBouncer, a test's own cluster)", len(servers))
			}
			if how == "kill" {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			var rest strings.Builder
			for lines.Scan() {
				rest.WriteString(lines.Text() + "\n")
			}
			err = cmd.Wait()
			t.Logf("the helper's output after its servers started:\n%s%s", rest.String(), stderr.String())
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the helper that was to %s ended with %v", how, err)
			}
			if ws := exit.Sys().(syscall.WaitStatus); (how == "kill") != (ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
				t.Fatalf("the helper that was to %s ended with %v", how, err)
			}
			// a deadline against a hang only: the verdict is the kernel's
			for _, l := range servers {
				deadline := time.Now().Add(2 * time.Minute)
				for {
					alive := running(l.pid)
					_, statErr := os.Stat(l.dir)
					if !alive && errors.Is(statErr, os.ErrNotExist) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after the helper ended (%s): server process %d still there: %v; its directory %s still there: %v",
							how, l.pid, alive, l.dir, statErr == nil)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
}

// TestHelperStartsServers is the test binary that
// TestServersEndWithTheTestBinary runs: it starts the shared cluster,
// PgBouncer before it and a cluster of the test's own, tells their
// processes and directories, and ends as it was told. Run by go test,
// without the variable, it is not that binary and does nothing.
func TestHelperStartsServers(t *testing.T) {
	how := os.Getenv(helperEnv)
	if how == "" {
		return
	}
	pooled, _ := Pooled(t)
	conn, err := pgx.Connect(context.Background(), pooled)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	own := &server{fast: true}
	if err := own.start(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	bouncerPid, bouncerDir := bouncer.cmd.Process.Pid, bouncer.dir
	mu.Unlock()
	for _, s := range []*server{cluster, own} {
		fmt.Printf("server %d %s\n", postmaster(t, s.dir), s.dir)
	}
	fmt.Printf("server %d %s\n", bouncerPid, bouncerDir)
	fmt.Println("started")
	switch how {
	case "fail":
		// Main stops the shared servers; the test's own cluster, which
		// no cleanup stops, is the watchdog's
		t.Fatal("the helper fails, as it was told")
	case "panic":
		panic("the helper panics, as it was told")
	case "kill":
		time.Sleep(time.Hour) // until the test kills it
	}
}

// postmaster is the pid of the server running in dir, from its
// postmaster.pid.
func postmaster(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	return pid
}

// running reports whether the process pid is there, as the kernel says:
// kill(pid, 0) finds it (ESRCH: it is not), and it is not a zombie (a
// process that has ended, waiting for its parent to hear of it).
func running(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// the state follows the command's name, which is in parentheses
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}
