package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis"
	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// TestFiles expands paths (files or directories) into flow test files.
func TestFiles(paths []string) ([]string, error) {
	if len(paths) == 0 {
		paths = []string{"."}
	}
	return trellis.FindTests(paths...)
}

// cassette returns the registry to run a test file with: recording its
// cassette (model set), replaying it when the file has one, else offline.
func cassette(env *Env, path string, model *llm.Provider, offline kind.Registry, live bool) (kind.Registry, *llm.Cassette, error) {
	cp := llm.CassettePath(path)
	if model != nil {
		cas, err := llm.OpenCassette(cp, true)
		if err != nil {
			return nil, nil, err
		}
		p := *model
		p.Cassette = cas
		return env.WithModel(&p), cas, nil
	}
	if _, err := os.Stat(cp); err != nil || live || env.WithModel == nil {
		return offline, nil, nil
	}
	cas, err := llm.OpenCassette(cp, false)
	if err != nil {
		return nil, nil, err
	}
	return env.WithModel(&llm.Provider{Cassette: cas}), cas, nil
}

// inCI reports whether the command runs in continuous integration, as
// the CI environment variable that CI services set says.
func inCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

func cmdTest(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "test")
	match := fs.String("run", "", "run only the tests whose name contains this text")
	verbose := fs.Bool("v", false, "list every test, not only failures")
	useModel := fs.Bool("model", false, "call the configured model instead of using fallbacks (tests are then not deterministic)")
	record := fs.Bool("record", false, "call the configured model and keep its replies in each test file's cassette (x.cassette.yaml), which later runs replay offline")
	reload := fs.Bool("reload", inCI(), "run each test twice, the second time with the state encoded, stored and decoded between every step, as another process reads it back; the two must take the same paths to the same outputs and states (default: on when the CI environment variable is set)")
	fromThread := fs.String("from-thread", "", "make a flow test of this thread (of the store --store names) and of FLOW, then run it")
	out := fs.String("out", "", "with --from-thread, the test file to write (default: FLOW.THREAD.test.yaml beside FLOW)")
	replace := fs.Bool("replace", false, "with --from-thread, write over the test file and its cassette if they exist")
	storeAddr := storeFlag(fs)
	paths, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if *reload && (*useModel || *record) {
		// a live model answers the two runs differently
		fmt.Fprintln(env.Stderr, "trellis test: --reload is off with --model and --record: a live model's replies differ from run to run")
		*reload = false
	}
	if *fromThread != "" {
		path, code := testFromThread(ctx, env, *storeAddr, *fromThread, paths, *out, *replace)
		if path == "" {
			return code
		}
		paths = []string{path}
	}
	files, err := TestFiles(paths)
	if err != nil {
		fmt.Fprintf(env.Stderr, "trellis test: %v\n", err)
		return 2
	}
	if len(files) == 0 {
		where := strings.Join(paths, ", ")
		if where == "" {
			where = "."
		}
		fmt.Fprintf(env.Stderr, "trellis test: nothing to check: no %s files in %s\n", testfile.Suffix, where)
		return exitUsage
	}
	offline := env.Offline
	if *useModel || offline == nil {
		offline = env.Registry
	}
	var model *llm.Provider
	if *record {
		if model = llm.FromEnv(); model == nil || env.WithModel == nil {
			fmt.Fprintln(env.Stderr, "trellis test --record: no model is configured (set OPENAI_BASE_URL or OPENAI_API_KEY)")
			return 2
		}
	}
	defer flow.Prepare(offline)() // for every file's flow
	passed, failed := 0, 0
	start := time.Now()
	for _, path := range files {
		f, err := testfile.Load(path)
		if err != nil {
			var le *diag.ListError
			if errors.As(err, &le) {
				fmt.Fprintf(env.Stdout, "FAIL %s: the test file is not valid\n", path)
				diag.WriteText(env.Stdout, le.List, le.Sources)
			} else {
				fmt.Fprintf(env.Stdout, "FAIL %s\n    %v\n", path, err)
			}
			failed++
			continue
		}
		reg, cas, err := cassette(env, path, model, offline, *useModel)
		if err != nil {
			fmt.Fprintf(env.Stdout, "FAIL %s\n    %v\n", path, err)
			failed++
			continue
		}
		results, err := testfile.RunFileWith(ctx, f, reg, testfile.Options{Match: *match, Reload: *reload})
		if cas != nil {
			if drifts := cas.Drifts(); len(drifts) > 0 {
				failed++
				fmt.Fprintf(env.Stdout, "FAIL %s: model replies drifted from the cassette\n", path)
				for _, d := range drifts {
					fmt.Fprintf(env.Stdout, "    %s\n", d)
				}
			}
			if *record && err == nil {
				if err := cas.Save(); err != nil {
					fmt.Fprintf(env.Stdout, "FAIL %s: %v\n", path, err)
					failed++
				} else {
					fmt.Fprintf(env.Stderr, "recorded %s\n", cas.Path)
				}
			}
		}
		if err != nil {
			var le *diag.ListError
			if errors.As(err, &le) {
				fmt.Fprintf(env.Stdout, "FAIL %s: the flow %s does not load\n", path, f.FlowPath())
				diag.WriteText(env.Stdout, le.List, le.Sources)
			} else {
				fmt.Fprintf(env.Stdout, "FAIL %s: %v\n", path, err)
			}
			failed++
			continue
		}
		for _, r := range results {
			if r.Passed() {
				passed++
				if *verbose {
					fmt.Fprintf(env.Stdout, "ok   %s: %s (%s)\n", path, r.Name, r.Took.Round(time.Millisecond))
				}
				continue
			}
			failed++
			fmt.Fprintf(env.Stdout, "FAIL %s: %s (%s)\n", path, r.Name, r.Took.Round(time.Millisecond))
			for _, m := range r.Failures {
				fmt.Fprintf(env.Stdout, "    %s\n", m)
			}
		}
	}
	fmt.Fprintf(env.Stderr, "%d passed, %d failed in %s\n", passed, failed, time.Since(start).Round(time.Millisecond))
	if failed > 0 {
		return 1
	}
	return 0
}

func cmdPrompt(ctx context.Context, env *Env, args []string) int {
	fs := flags(env, "prompt")
	with := fs.String("with", "", "render over a new thread created with these values (YAML or JSON file)")
	thread := fs.String("thread", "", "render over this thread's current state")
	storeAddr := storeFlag(fs)
	var inputs multi
	fs.Var(&inputs, "input", "set an input field: name=value (repeatable)")
	asJSON := fs.Bool("json", false, "print the request as JSON")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 3 || pos[0] != "render" {
		fs.Usage()
		return 2
	}
	f, code := load(env, pos[1])
	if f == nil {
		return code
	}
	g := f.Graph()
	n, found := g.Node(pos[2])
	if !found {
		fmt.Fprintf(env.Stderr, "trellis prompt: %s has no node %q\n", g.Name, pos[2])
		return 2
	}
	r, isPreviewer := n.Impl.(kind.Previewer)
	if !isPreviewer {
		fmt.Fprintf(env.Stderr, "trellis prompt: node %q (%s) sends no prompt\n", n.Name, n.Kind)
		return 2
	}
	in, err := ParseInputs(f, "--input", inputs, "")
	if err != nil {
		return fail(env, "prompt", err)
	}
	var state map[string]any
	if *thread != "" {
		rt, err := openRuntime(ctx, *storeAddr)
		if err != nil {
			return fail(env, "prompt", err)
		}
		defer rt.Close()
		snap, err := rt.State(ctx, *thread)
		if err != nil {
			return fail(env, "prompt", err)
		}
		state = snap.Values
	} else {
		values := map[string]any{}
		if *with != "" {
			if values, err = readValues(*with); err != nil {
				return fail(env, "prompt", err)
			}
		}
		rt, err := trellis.Open(ctx, "memory")
		if err != nil {
			return fail(env, "prompt", err)
		}
		defer rt.Close()
		snap, err := rt.Create(ctx, f, "render", values)
		if err != nil {
			return fail(env, "prompt", err)
		}
		state = snap.Values
	}
	p, err := r.Preview(kind.View(n.Name, g.Vars(state, in)))
	if err != nil {
		return fail(env, "prompt", err)
	}
	if *asJSON {
		printJSON(env, p.Request)
		return 0
	}
	fmt.Fprintf(env.Stdout, "# %s\n", p.Title)
	for _, s := range p.Sections {
		fmt.Fprintf(env.Stdout, "\n## %s\n\n%s\n", s.Name, strings.TrimRight(s.Text, "\n"))
	}
	return 0
}

func cmdDev(ctx context.Context, env *Env, args []string) int {
	if len(args) > 0 && args[0] == "loadtest" {
		return cmdLoadtest(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "mcp-server" {
		return cmdMCPServer(ctx, env, args[1:])
	}
	if len(args) > 0 && args[0] == "sbom" {
		return cmdSBOM(ctx, env, args[1:])
	}
	fs := flags(env, "dev")
	addr := fs.String("addr", "127.0.0.1:8089", "address to listen on")
	script := fs.String("script", "", "YAML file of rules: [{match: TEXT, replies: [{content, tool_calls: [{name, arguments}], status, retry_after, delay, cut}]}]")
	key := fs.String("key", "", "require this API key")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] != "model-server" {
		fs.Usage()
		return 2
	}
	var rules []llmtest.Rule
	if *script != "" {
		b, err := os.ReadFile(*script)
		if err == nil {
			err = yaml.Unmarshal(b, &rules)
		}
		if err != nil {
			return fail(env, "dev", err)
		}
	}
	srv := llmtest.New(rules...)
	srv.Key = *key
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(env, "dev", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(env.Stderr, "model server on http://%s/v1 (%d rules); use OPENAI_BASE_URL=http://%s/v1\n", ln.Addr(), len(rules), ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(env, "dev", err)
	}
	return 0
}

// testFromThread writes the flow test made of a thread (and its
// cassette), and returns its path.
func testFromThread(ctx context.Context, env *Env, storeAddr, thread string, pos []string, out string, replace bool) (string, int) {
	if len(pos) != 1 {
		return "", fail(env, "test", usagef("--from-thread THREAD takes the thread's FLOW file"))
	}
	f, code := load(env, pos[0])
	if f == nil {
		return "", code
	}
	if out == "" {
		base := strings.TrimSuffix(filepath.Base(f.Path()), filepath.Ext(f.Path()))
		out = filepath.Join(filepath.Dir(f.Path()), base+"."+fileSafe(thread)+testfile.Suffix)
	}
	if !strings.HasSuffix(out, testfile.Suffix) {
		return "", fail(env, "test", usagef("--out %s: a flow test's file name ends in %s", out, testfile.Suffix))
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return "", fail(env, "test", err)
	}
	absFlow, err := filepath.Abs(f.Path())
	if err != nil {
		return "", fail(env, "test", err)
	}
	rel, err := filepath.Rel(filepath.Dir(absOut), absFlow)
	if err != nil {
		return "", fail(env, "test", err)
	}
	rt, err := openRuntime(ctx, storeAddr)
	if err != nil {
		return "", fail(env, "test", err)
	}
	defer rt.Close()
	offline := env.Offline
	if offline == nil {
		offline = env.Registry
	}
	made, err := testfile.FromThread(ctx, rt.Store(), f.Graph(), offline, thread, out, filepath.ToSlash(rel))
	if err != nil {
		return "", fail(env, "test", missing(err, thread, 0))
	}
	files := []struct {
		path string
		text []byte
	}{{out, made.Text}}
	cassettePath := llm.CassettePath(out)
	if len(made.Replies) > 0 {
		text, err := testfile.WriteCassette(made.Replies)
		if err != nil {
			return "", fail(env, "test", err)
		}
		files = append(files, struct {
			path string
			text []byte
		}{cassettePath, text})
	} else if _, err := os.Stat(cassettePath); err == nil && replace {
		// a cassette of an earlier test of this name would answer for
		// the thread's fallbacks
		if err := os.Remove(cassettePath); err != nil {
			return "", fail(env, "test", err)
		}
	}
	for _, file := range files {
		if _, err := os.Stat(file.path); err == nil && !replace {
			return "", fail(env, "test", usagef("%s exists: --replace writes over it", file.path))
		}
	}
	for _, file := range files {
		if err := os.WriteFile(file.path, file.text, 0o644); err != nil {
			return "", fail(env, "test", err)
		}
		fmt.Fprintf(env.Stderr, "wrote %s\n", file.path)
	}
	for _, field := range made.Unasserted {
		fmt.Fprintf(env.Stderr, "not asserted: %s, which comes out otherwise each run\n", field)
	}
	return out, exitOK
}

// fileSafe is a thread id as part of a file name.
func fileSafe(id string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, id)
}
