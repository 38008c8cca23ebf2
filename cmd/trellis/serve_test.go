package main

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	facade "github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/api/server"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store"
)

// trellisProcess starts the command line in a process of its own.
func trellisProcess(t *testing.T, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), append(env, "TRELLIS_AS_MAIN=1")...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, &stderr
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady waits until the server answers ready: a process's start
// takes many times longer on a loaded machine than on an idle one, and
// the bound is only against a hang.
func waitReady(t *testing.T, c *api.Client) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); c.Ready(context.Background()) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not become ready in 2 minutes")
		}
	}
}

// SIGTERM stops a server gracefully: it stops taking requests, lets the
// run in progress finish its step and checkpoint, queues the rest of the
// run again, and exits 0; the next server resumes the run.
func TestServeStopsAtAStepBoundary(t *testing.T) {
	ctx := context.Background()
	model := llmtest.New(llmtest.Rule{Match: "introduce themselves", Replies: []llmtest.Reply{{Content: "Welcome!", Delay: 1500 * time.Millisecond}}})
	ms := httptest.NewServer(model)
	defer ms.Close()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "t.db")
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
	env := []string{"OPENAI_BASE_URL=" + ms.URL + "/v1", "OPENAI_API_KEY=k"}
	addr := freeAddr(t)
	serve, stderr := trellisProcess(t, env, "serve", "--flows", "../../flows", "--store", db, "--addr", addr)
	c := api.NewClient("http://"+addr, key)
	waitReady(t, c)
	values, _ := schema.ReadFile("../../flows/examples/candidate.yaml")
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "interview", Values: values.(map[string]any)}); err != nil {
		t.Fatal(err)
	}
	run, err := c.StartRun(ctx, "ada", api.StartRun{})
	if err != nil {
		t.Fatal(err)
	}
	// the greeting's model call is in progress
	for len(model.Calls()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := serve.Wait(); err != nil {
		t.Fatalf("serve exited with %v:\n%s", err, stderr.String())
	}
	// (that it waited for the step in progress is what it committed:
	// the model's reply, below)
	if !strings.Contains(stderr.String(), "shutting down") {
		t.Fatalf("no shutdown in the log:\n%s", stderr.String())
	}

	// the step completed and was committed; the rest of the run is
	// queued again, and the next server to start resumes it
	rt, err = facade.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	st, err := rt.State(ctx, "acme/ada")
	rt.Close()
	if err != nil || st.Values["next_message"] != "Welcome!" || fmt.Sprint(st.Next) != "[finalize_turn]" {
		t.Fatalf("state after the stop: %v next %v (%v)", st.Values["next_message"], st.Next, err)
	}
	serve2, stderr2 := trellisProcess(t, env, "serve", "--flows", "../../flows", "--store", db, "--addr", addr)
	waitReady(t, c)
	done, err := c.Join(ctx, "ada", run.ID)
	if err != nil || done.Status != api.RunSucceeded || len(done.State["conversation_history"].([]any)) != 1 {
		t.Fatalf("the run after the restart: %+v %v", done, err)
	}
	if len(model.Calls()) != 1 {
		t.Fatalf("the model was called %d times: the resumed run ran the greeting again", len(model.Calls()))
	}
	_ = serve2.Process.Signal(syscall.SIGTERM)
	if err := serve2.Wait(); err != nil {
		t.Fatalf("second serve: %v\n%s", err, stderr2.String())
	}
}

// syncBuffer is a process's output, read while the process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
