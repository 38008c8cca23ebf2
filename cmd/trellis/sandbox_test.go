package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/store"
)

const sandboxFlow = `version: 1
name: sandboxed
input: [code]
state:
  schema:
    type: object
    properties:
      code: {type: string, default: ""}
      status: {type: string, default: ""}
nodes:
  run_code:
    kind: sandbox
    language: python
    code: state.code
    limits: {wall_time: 40s, cpu_time: 30s}
    writes:
      status: output.status
edges:
  - {from: START, to: run_code}
  - {from: run_code, to: END}
`

// hang is code that runs until it is stopped.
const hang = "import time\nwhile True:\n    time.sleep(1)\n"

// The command takes its sandbox with it: after `trellis run` ends, after
// it is stopped by SIGTERM, SIGINT or SIGHUP mid-execution, and after
// `serve` stops on SIGTERM, no container (warm ones included), cgroup or
// process of its executions is left; after SIGKILL, the next trellis to
// make the sandbox removes what it left.
func TestTheSandboxEndsWithTheCommand(t *testing.T) {
	env := sandboxtest.Engine(t)
	host := strings.TrimPrefix(env[0], "DOCKER_HOST=")
	dir := t.TempDir()
	flows := filepath.Join(dir, "flows")
	if err := os.MkdirAll(flows, 0o755); err != nil {
		t.Fatal(err)
	}
	flow := filepath.Join(flows, "sandboxed.yaml")
	if err := os.WriteFile(flow, []byte(sandboxFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	hangFile := filepath.Join(dir, "hang.yaml")
	if err := os.WriteFile(hangFile, []byte("code: |\n  "+strings.ReplaceAll(strings.TrimSpace(hang), "\n", "\n  ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	left := func(t *testing.T, pid int) []string { return sandboxtest.Owned(t, host, pid) }
	// waitFor waits until the process runs code in the sandbox
	waitFor := func(t *testing.T, pid int, stderr *syncBuffer) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); len(left(t, pid)) == 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no execution started:\n%s", stderr.String())
			}
		}
		time.Sleep(time.Second) // the code runs
	}
	waitGone := func(t *testing.T, pid int) {
		t.Helper()
		// what is removed in the background is gone a moment later (the
		// bound is against a hang: a loaded engine takes its time)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			l := left(t, pid)
			if len(l) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("left behind: %v", l)
			}
		}
	}
	for _, backend := range []string{"docker", "local"} {
		benv := append(append([]string{}, env...), "TRELLIS_SANDBOX="+backend, "TRELLIS_SANDBOX_WARM=2")
		db := func() string { return "sqlite:" + filepath.Join(t.TempDir(), "t.db") }
		t.Run(backend+"/run ends", func(t *testing.T) {
			cmd, stderr := trellisProcess(t, benv, "run", flow, "--input", "code=print('hi')", "--store", db())
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			waitGone(t, cmd.Process.Pid)
		})
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
			t.Run(backend+"/run stopped by "+sig.String(), func(t *testing.T) {
				cmd, stderr := trellisProcess(t, benv, "run", flow, "--input-file", hangFile, "--store", db())
				waitFor(t, cmd.Process.Pid, stderr)
				_ = cmd.Process.Signal(sig)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(2 * time.Minute):
					_ = cmd.Process.Kill()
					<-done // waited for here, not by the cleanup as well
					t.Fatalf("still running 2 minutes after %v", sig)
				}
				waitGone(t, cmd.Process.Pid)
			})
		}
		t.Run(backend+"/SIGKILL, then another trellis", func(t *testing.T) {
			cmd, stderr := trellisProcess(t, benv, "run", flow, "--input-file", hangFile, "--store", db())
			waitFor(t, cmd.Process.Pid, stderr)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			check, _ := trellisProcess(t, benv, "sandbox", "check")
			_ = check.Wait()
			waitGone(t, cmd.Process.Pid)
		})
	}
	t.Run("serve stops on SIGTERM", func(t *testing.T) {
		ctx := context.Background()
		db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
		rt, err := facade.Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		cat, _ := store.CatalogOf(rt.Store())
		_, key, err := server.CreateKey(ctx, cat, "acme", "", false)
		rt.Close()
		if err != nil {
			t.Fatal(err)
		}
		addr := freeAddr(t)
		serve, stderr := trellisProcess(t, append(append([]string{}, env...), "TRELLIS_SANDBOX=docker"), "serve", "--flows", flows, "--store", db, "--addr", addr, "--stop-timeout", "2s")
		c := api.NewClient("http://"+addr, key)
		waitReady(t, c)
		if _, err := c.CreateThread(ctx, api.CreateThread{ID: "t", Flow: "sandboxed"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.StartRun(ctx, "t", api.StartRun{Input: map[string]any{"code": hang}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, serve.Process.Pid, stderr)
		_ = serve.Process.Signal(syscall.SIGTERM)
		if err := serve.Wait(); err != nil {
			t.Fatalf("serve: %v\n%s", err, stderr.String())
		}
		waitGone(t, serve.Process.Pid)
	})
}
