package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellisflow/trellis/cmd/trellis/internal/cli"
	"github.com/trellisflow/trellis/nodes/all"
	"github.com/trellisflow/trellis/nodes/all/alltest"

	openai "github.com/sashabaranov/go-openai"

	"github.com/trellisflow/trellis/cmd/trellis/app"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// TestMain lets a test start this test binary as the trellis command (a
// real process) by setting TRELLIS_AS_MAIN (test-kinds: with the
// runtime's test kinds too, whose steps take as long as a flow says), and
// stops the PostgreSQL cluster tests started.
func TestMain(m *testing.M) {
	switch os.Getenv("TRELLIS_AS_MAIN") {
	case "1":
		os.Exit(app.Main(os.Args[1:]))
	case "test-kinds":
		os.Exit(cli.Main(os.Args[1:], &cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Registry: alltest.WithTestKinds()}))
	}
	os.Exit(storetest.Main(m))
}

func TestFlowTestCommand(t *testing.T) {
	out, stderr, exit := trellis(t, "test", "-v", "../../flows")
	if exit != 0 || !strings.Contains(out, "ok   ../../flows/interview.test.yaml") || !strings.Contains(stderr, " passed, 0 failed") {
		t.Fatalf("exit %d\n%s%s", exit, out, stderr)
	}
	// a failing assertion names the file and line, and the values it read
	dir := t.TempDir()
	flowSrc, _ := os.ReadFile(examples + "/E003.ok.yaml")
	os.WriteFile(filepath.Join(dir, "f.yaml"), flowSrc, 0o644)
	os.WriteFile(filepath.Join(dir, "f.test.yaml"), []byte(`flow: f.yaml
tests:
  - name: counts
    runs:
      - input: {count: 2}
        expect:
          path: [first, second]
          state: ["state.count == 4"]
`), 0o644)
	out, _, exit = trellis(t, "test", dir)
	if exit != 1 || !strings.Contains(out, "f.test.yaml:8:19: run 1: state: state.count == 4 does not hold\n      state.count = 3") {
		t.Fatalf("exit %d\n%s", exit, out)
	}
}

func TestPromptRender(t *testing.T) {
	out, stderr, exit := trellis(t, "prompt", "render", "../../flows/resume_review.yaml", "recruiter", "--with", "../../flows/examples/resume.yaml")
	if exit != 0 {
		t.Fatalf("exit %d: %s", exit, stderr)
	}
	for _, want := range []string{"# prompt resume_review/recruiter", "hiring for LLM Engineer", "review round 1", "name: Grace Lin", "## reply schema", `"agent_name"`} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	_, stderr, exit = trellis(t, "prompt", "render", "../../flows/resume_review.yaml", "aggregator")
	if exit != 2 || !strings.Contains(stderr, "sends no prompt") {
		t.Fatalf("exit %d: %s", exit, stderr)
	}
}

// TestDevModelServer starts `trellis dev model-server` as a process, talks
// to it with go-openai (plain and streamed) and stops it with SIGINT.
func TestDevModelServer(t *testing.T) {
	script := filepath.Join(t.TempDir(), "script.yaml")
	os.WriteFile(script, []byte("- match: hello\n  replies:\n    - {content: hi there from the script}\n"+
		"- match: weather\n  replies:\n    - tool_calls: [{id: c1, name: get_weather, arguments: {city: Oslo}}, {name: get_time, arguments: {zone: CET}}]\n"), 0o644)
	cmd := exec.Command(os.Args[0], "dev", "model-server", "--addr", "127.0.0.1:0", "--script", script, "--key", "k1")
	cmd.Env = append(os.Environ(), "TRELLIS_AS_MAIN=1")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`http://(\S+)/v1`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no address in %q", line)
	}
	cfg := openai.DefaultConfig("k1")
	cfg.BaseURL = "http://" + m[1] + "/v1"
	c := openai.NewClientWithConfig(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hello"}}}
	resp, err := c.CreateChatCompletion(ctx, req)
	if err != nil || resp.Choices[0].Message.Content != "hi there from the script" {
		t.Fatalf("reply %+v, %v", resp, err)
	}
	stream, err := c.CreateChatCompletionStream(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk.Choices) > 0 {
			got.WriteString(chunk.Choices[0].Delta.Content)
		}
	}
	stream.Close()
	if got.String() != "hi there from the script" {
		t.Fatalf("streamed %q", got.String())
	}
	// a scripted reply calls tools: two at once, plainly and streamed
	treq := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "the weather?"}},
		Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "get_weather", Parameters: map[string]any{"type": "object"}}}}}
	tresp, err := c.CreateChatCompletion(ctx, treq)
	if err != nil || tresp.Choices[0].FinishReason != openai.FinishReasonToolCalls || len(tresp.Choices[0].Message.ToolCalls) != 2 {
		t.Fatalf("tool calls %+v, %v", tresp, err)
	}
	if tc := tresp.Choices[0].Message.ToolCalls[0]; tc.ID != "c1" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Oslo"}` {
		t.Fatalf("tool call %+v", tc)
	}
	tstream, err := c.CreateChatCompletionStream(ctx, treq)
	if err != nil {
		t.Fatal(err)
	}
	args := map[int]string{}
	for {
		chunk, err := tstream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range chunk.Choices[0].Delta.ToolCalls {
			args[*tc.Index] += tc.Function.Arguments
		}
	}
	tstream.Close()
	if args[0] != `{"city":"Oslo"}` || args[1] != `{"zone":"CET"}` {
		t.Fatalf("streamed tool calls %v", args)
	}
	bad := openai.DefaultConfig("wrong")
	bad.BaseURL = cfg.BaseURL
	if _, err := openai.NewClientWithConfig(bad).CreateChatCompletion(ctx, req); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong key was accepted: %v", err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("model server exit: %v", err)
	}
}

// trellis diff: exit 0 for the same flow, 1 with the changes, and a
// pull-request comment with the changed node highlighted in the graph.
func TestDiffCommand(t *testing.T) {
	src, err := os.ReadFile("../../flows/examples/greet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	changed := filepath.Join(dir, "greet.yaml")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(src), "'Hello, '", "'Hi, '", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errs, code := trellis(t, "diff", "../../flows/examples/greet.yaml", "../../flows/examples/greet.yaml"); code != 0 || !strings.Contains(out, "mean the same flow") {
		t.Fatalf("same flow: %d %s %s", code, out, errs)
	}
	out, errs, code := trellis(t, "diff", "../../flows/examples/greet.yaml", changed)
	if code != 1 || !strings.Contains(out, "~ node greet") || !strings.Contains(out, `set.greeting: "'Hello, ' + input.name + '!'" → "'Hi, ' + input.name + '!'"`) {
		t.Fatalf("text: %d\n%s%s", code, out, errs)
	}
	out, _, code = trellis(t, "diff", "--format", "github", "../../flows/examples/greet.yaml", changed)
	if code != 1 || !strings.Contains(out, "```mermaid\nflowchart TD") || !strings.Contains(out, "class n_greet changed") {
		t.Fatalf("github: %d\n%s", code, out)
	}
	if _, errs, code := trellis(t, "diff", "no-such-rev:flows/x.yaml", changed); code != 2 || errs == "" {
		t.Fatalf("a bad revision: %d %s", code, errs)
	}
}

// BenchmarkValidateCommand validates both reference flows as `trellis
// validate flows/interview.yaml flows/resume_review.yaml` does once its
// process has started (the flow format compiled once per process).
//
//	go test ./cmd/trellis -run '^$' -bench ValidateCommand -benchtime 20x
func BenchmarkValidateCommand(b *testing.B) {
	env := &cli.Env{Registry: all.Registry()}
	files := []string{"../../flows/interview.yaml", "../../flows/resume_review.yaml"}
	for b.Loop() {
		if dl, _ := cli.ValidateFiles(files, env); len(dl) > 0 {
			b.Fatal(dl)
		}
	}
}

// When the new version does not load, every format of diff says why
// the graph is not drawn, and with which errors.
func TestDiffSaysWhyThereIsNoDrawing(t *testing.T) {
	src, err := os.ReadFile("../../flows/examples/greet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "greet.yaml")
	if err := os.WriteFile(broken, []byte(strings.Replace(string(src), "to: END", "to: ENDD", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	old := "../../flows/examples/greet.yaml"
	why := broken + " has 1 error, so its graph cannot be drawn"
	out, errs, code := trellis(t, "diff", "--format", "github", old, broken)
	if code != 1 || !strings.Contains(out, "> The graph is not drawn: "+why) || !strings.Contains(out, `edge target \"ENDD\" is not a node`) && !strings.Contains(out, `edge target "ENDD" is not a node`) {
		t.Errorf("github: %d\n%s%s", code, out, errs)
	}
	out, errs, code = trellis(t, "diff", "--format", "mermaid", old, broken)
	if code != 2 || out != "" || !strings.Contains(errs, "trellis diff: no drawing: "+why) || !strings.Contains(errs, "error[G001]") {
		t.Errorf("mermaid: %d\n%s%s", code, out, errs)
	}
	for _, f := range []string{"text", "json"} {
		_, errs, code = trellis(t, "diff", "--format", f, old, broken)
		if code != 1 || !strings.Contains(errs, "note: "+why) {
			t.Errorf("%s: %d\n%s", f, code, errs)
		}
	}
}

// When the old version does not load, every format of diff says so,
// and that what the change means for its threads cannot be said.
func TestDiffSaysWhenTheOldVersionDoesNotLoad(t *testing.T) {
	src, err := os.ReadFile("../../flows/examples/greet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "greet.yaml")
	if err := os.WriteFile(broken, []byte(strings.Replace(string(src), "to: END", "to: ENDD", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	fixed := "../../flows/examples/greet.yaml"
	note := "the old version " + broken + " does not load (1 error; trellis validate " + broken + " lists them), so what the change means for the threads of the old version is not said"
	out, errs, code := trellis(t, "diff", "--format", "github", broken, fixed)
	if code != 1 || !strings.Contains(out, "> "+note+".") {
		t.Errorf("github: %d\n%s%s", code, out, errs)
	}
	for _, f := range []string{"text", "json"} {
		_, errs, code = trellis(t, "diff", "--format", f, broken, fixed)
		if code != 1 || !strings.Contains(errs, "note: "+note) {
			t.Errorf("%s: %d\n%s", f, code, errs)
		}
	}
	// both load: no such note
	if _, errs, _ := trellis(t, "diff", fixed, fixed); strings.Contains(errs, "does not load") {
		t.Errorf("a note with both versions loading: %s", errs)
	}
}
