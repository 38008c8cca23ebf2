package studio_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"

	"github.com/trellisflow/trellis/cmd/trellis/app"
	"github.com/trellisflow/trellis/cmd/trellis/internal/browser"
	studiopage "github.com/trellisflow/trellis/cmd/trellis/internal/studio"
	"github.com/trellisflow/trellis/nodes/llm/llmtest"
	"github.com/trellisflow/trellis/nodes/tools/mcptool/mcptest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

var shots = flag.String("shots", filepath.Join(os.TempDir(), "trellis-studio-shots"), "the directory the tests write their screenshots to")

// TestMain lets a test start this test binary as the trellis command (a
// real `trellis studio` process) by setting TRELLIS_AS_MAIN, and stops
// the PostgreSQL cluster the tests started.
func TestMain(m *testing.M) {
	if os.Getenv("TRELLIS_AS_MAIN") == "1" {
		os.Exit(app.Main(os.Args[1:]))
	}
	os.Exit(storetest.Main(m))
}

const root = "../../../.."

// project copies the repository's flows, prompts and schemas into a
// directory of the test's, so that a save writes there.
func project(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{"flows", "prompts", "schemas"} {
		if err := os.CopyFS(filepath.Join(dir, d), os.DirFS(filepath.Join(root, d))); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// studio is a `trellis studio` process and what it printed: its
// address, the sign-in file it wrote and the one-time token in it.
type studio struct {
	base, file, token string
	cmd               *exec.Cmd
	stderr            *syncBuffer
}

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

var (
	baseRE  = regexp.MustCompile(`at (http://127\.0\.0\.1:\d+)/studio\.$`)
	fileRE  = regexp.MustCompile(`^    (file:///\S+/sign-in\.html)$`)
	tokenRE = regexp.MustCompile(`one-time token instead: (trs_[a-z2-7]+)$`)
)

// start runs the command (wrap, when set, runs it inside another
// command) and waits for the address it prints.
func start(t *testing.T, env []string, wrap []string, args ...string) *studio {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), os.Args[0], "studio"), args...)
	argv = append(argv, "--no-open", "--addr", "127.0.0.1:0")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), append(env, "TRELLIS_AS_MAIN=1")...)
	s := &studio{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = s.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if m := baseRE.FindStringSubmatch(line); m != nil {
				s.base = m[1]
			}
			if m := fileRE.FindStringSubmatch(line); m != nil {
				s.file = m[1]
			}
			if m := tokenRE.FindStringSubmatch(line); m != nil {
				s.token = m[1]
				close(found)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case <-found:
		if s.base == "" || s.file == "" {
			t.Fatalf("trellis studio printed no address or sign-in file (%q, %q)", s.base, s.file)
		}
		// a studio killed leaves its file (its token died with it)
		if u, err := url.Parse(s.file); err == nil {
			t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(u.Path)) })
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("trellis studio printed no sign-in:\n%s", s.stderr)
	}
	return s
}

// gate holds the model's answers while it is shut, as a model thinking
// long would: a run asking it is under way for sure until it opens.
type gate struct {
	mu      sync.Mutex
	shut    chan struct{} // closed to open the gate; nil while open
	waiting int
}

func (g *gate) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		shut := g.shut
		if shut != nil {
			g.waiting++
		}
		g.mu.Unlock()
		if shut != nil {
			select {
			case <-shut:
			case <-r.Context().Done():
			}
			g.mu.Lock()
			g.waiting--
			g.mu.Unlock()
			if r.Context().Err() != nil {
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// close shuts the gate; open opens it, letting the held requests on.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

// held is how many requests wait at the shut gate.
func (g *gate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// model is the scripted model of the interview, answering after a delay
// as a real one would, so that a running node can be seen; behind a gate
// a test may shut.
func model(t *testing.T) ([]string, *gate) {
	b, err := os.ReadFile(filepath.Join(root, "flows/examples/interview.model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []llmtest.Rule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(rules...)
	srv.Latency = 300 * time.Millisecond
	g := &gate{}
	ts := httptest.NewServer(g.wrap(srv))
	t.Cleanup(ts.Close)
	t.Cleanup(g.open)
	return []string{"OPENAI_BASE_URL=" + ts.URL + "/v1", "OPENAI_API_KEY=sk-test", "TRELLIS_MODEL=scripted"}, g
}

// page is a browser on a studio, with the key the page signed in with.
type page struct {
	t      *testing.T
	b      *browser.Browser
	ctx    context.Context
	s      *studio
	client *api.Client
	name   string
}

// open signs the page in with the studio's sign-in file, then opens the
// flow in the signed-in tab and waits until it is drawn. The page's
// deadline is only against a hang: on a busy machine a test's runs and
// redrawing take their time.
func open(t *testing.T, s *studio, flow string) *page {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	b := browser.Chromium(t, 1280, 800)
	p := &page{t: t, b: b, ctx: ctx, s: s, name: strings.NewReplacer("/", "-", "Test", "").Replace(t.Name())}
	t.Cleanup(func() {
		// a script error the page did not handle is a defect whatever
		// the test looked at
		for _, line := range strings.Split(b.Log(), "\n") {
			if strings.HasPrefix(line, "exception: ") {
				t.Errorf("the page threw: %s", strings.TrimPrefix(line, "exception: "))
			}
		}
		if t.Failed() {
			t.Logf("the page and chromium said:\n%s", b.Log())
			t.Logf("trellis studio said:\n%s", s.stderr)
			p.shot("failed")
		}
	})
	p.signIn()
	// the key is the tab's: an address naming the flow opens it
	if err := b.Navigate(ctx, "about:blank"); err != nil {
		t.Fatal(err)
	}
	if err := b.Navigate(ctx, s.base+"/studio#flow="+flow); err != nil {
		t.Fatal(err)
	}
	p.wait(`window.trellisStudio && trellisStudio.ready && trellisStudio.flow && trellisStudio.flow.name === '` + flow + `' && document.querySelectorAll('#graph .node').length > 0`)
	var key string
	p.eval(`sessionStorage.getItem('trellis.studio.key')`, &key)
	p.client = api.NewClient(s.base, key)
	return p
}

// signIn opens the sign-in file `trellis studio` wrote and waits until
// the page it posts to has taken its key.
func (p *page) signIn() {
	p.t.Helper()
	if err := p.b.Navigate(p.ctx, p.s.file); err != nil {
		p.t.Fatal(err)
	}
	p.wait(`location.origin + location.pathname === '` + p.s.base + `/studio' && window.trellisStudio && trellisStudio.ready && sessionStorage.getItem('trellis.studio.key') !== null`)
}

func (p *page) eval(expr string, out any) {
	p.t.Helper()
	if err := p.b.Eval(p.ctx, expr, out); err != nil {
		p.t.Fatal(err)
	}
}

func (p *page) wait(expr string) {
	p.t.Helper()
	if err := p.b.WaitTrue(p.ctx, expr); err != nil {
		var status string
		_ = p.b.Eval(context.Background(), `document.getElementById('status').textContent`, &status)
		p.t.Fatalf("%v\nthe page's status: %s", err, status)
	}
}

// waitValue evaluates expr until it is not null, and decodes that value
// into out: what is seen at the moment a condition holds.
func (p *page) waitValue(expr string, out any) {
	p.t.Helper()
	for {
		var v json.RawMessage
		err := p.b.Eval(p.ctx, expr, &v)
		if err == nil && len(v) > 0 && string(v) != "null" {
			if err := json.Unmarshal(v, out); err != nil {
				p.t.Fatal(err)
			}
			return
		}
		select {
		case <-p.ctx.Done():
			var status string
			_ = p.b.Eval(context.Background(), `document.getElementById('status').textContent`, &status)
			p.t.Fatalf("waiting for %s: %v (last error: %v)\nthe page's status: %s", expr, p.ctx.Err(), err, status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *page) click(selector string) {
	p.t.Helper()
	if err := p.b.ClickOn(p.ctx, selector); err != nil {
		p.t.Fatal(err)
	}
}

// typeInto focuses an element and types text into it.
func (p *page) typeInto(selector, text string) {
	p.t.Helper()
	p.click(selector)
	if err := p.b.InsertText(p.ctx, text); err != nil {
		p.t.Fatal(err)
	}
}

// runID is the id of the run the page shows ("" before its stream has
// named it, or when it shows none).
func (p *page) runID() string {
	p.t.Helper()
	var id string
	p.eval(`(trellisStudio.run && trellisStudio.run.id) || ''`, &id)
	return id
}

// waitRunAfter waits until the page shows a run other than the one
// named prev, settled (its end, and the thread as it left it, shown),
// and cond holds.
func (p *page) waitRunAfter(prev, cond string) {
	p.t.Helper()
	q, _ := json.Marshal(prev)
	p.wait(`trellisStudio.run && trellisStudio.run.settled && trellisStudio.run.id !== ` + string(q) + ` && (` + cond + `)`)
}

// refresh presses the run panel's Refresh and waits until the thread
// read anew is drawn: what was typed must outlive it.
func (p *page) refresh() {
	p.t.Helper()
	var n int
	p.eval(`trellisStudio.threadLoads || 0`, &n)
	p.click("#refresh")
	p.wait(`(trellisStudio.threadLoads || 0) > ` + strconv.Itoa(n))
}

// selectThread chooses a thread in the header's list, as a person does.
func (p *page) selectThread(id string) {
	p.t.Helper()
	q, _ := json.Marshal(id)
	p.eval(`(() => { const s = document.getElementById('thread'); s.value = `+string(q)+`; s.dispatchEvent(new Event('change')); return s.value === `+string(q)+`; })()`, nil)
}

// value is what a form field holds.
func (p *page) value(selector string) string {
	p.t.Helper()
	var s string
	sel, _ := json.Marshal(selector)
	p.eval(`(document.querySelector(`+string(sel)+`) || {}).value || ''`, &s)
	return s
}

func (p *page) text(selector string) string {
	p.t.Helper()
	var s string
	sel, _ := json.Marshal(selector)
	p.eval(`(document.querySelector(`+string(sel)+`) || {}).textContent || ''`, &s)
	return s
}

func (p *page) count(selector string) int {
	p.t.Helper()
	var n int
	sel, _ := json.Marshal(selector)
	p.eval(`document.querySelectorAll(`+string(sel)+`).length`, &n)
	return n
}

// shot writes a screenshot named after the test and the state it shows.
func (p *page) shot(state string) string {
	if err := os.MkdirAll(*shots, 0o755); err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join(*shots, p.name+"-"+state+".png")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.b.Screenshot(ctx, path); err != nil {
		p.t.Errorf("screenshot %s: %v", path, err)
		return ""
	}
	p.t.Logf("screenshot: %s", path)
	return path
}

// trellisCLI runs a command of the trellis command line as a process.
func trellisCLI(t *testing.T, args ...string) string {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TRELLIS_AS_MAIN=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("trellis %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// The interview's graph renders with one element per node and per arc
// of the API's graph JSON; a subflow expands into a cluster of its
// child's nodes; a node shows its settings, what it writes and reads,
// and its prompt rendered over the flow's defaults.
func TestStudioDrawsTheGraph(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "interview")
	var g struct {
		Nodes []struct {
			Name    string `json:"name"`
			Subflow *struct {
				Nodes []any `json:"nodes"`
			} `json:"subflow"`
		} `json:"nodes"`
		Arcs []struct{ From, To string } `json:"arcs"`
	}
	b, _ := json.Marshal(p.mustGraph("interview"))
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if n := p.count("#graph .node"); n != len(g.Nodes) {
		t.Errorf("%d node elements, the graph has %d nodes", n, len(g.Nodes))
	}
	if n := p.count("#graph .edge"); n != len(g.Arcs) {
		t.Errorf("%d edge elements, the graph has %d arcs", n, len(g.Arcs))
	}
	if n := p.count("#graph .terminal"); n != 2 {
		t.Errorf("%d START/END elements", n)
	}
	var drawn []string
	p.eval(`[...document.querySelectorAll('#graph .node')].map(n => n.dataset.node)`, &drawn)
	for _, n := range g.Nodes {
		if !containsString(drawn, n.Name) {
			t.Errorf("node %s is not drawn (drawn: %v)", n.Name, drawn)
		}
	}
	for _, a := range g.Arcs {
		sel := fmt.Sprintf(`#graph .edge[data-from=%q][data-to=%q]`, a.From, a.To)
		if p.count(sel) == 0 {
			t.Errorf("arc %s → %s is not drawn", a.From, a.To)
		}
	}
	if !strings.Contains(p.text(`#graph .edge[data-from="decide_next_action"][data-to="closing"]`), "→ closing") {
		t.Errorf("the route to closing is not labelled")
	}
	// the version new threads start on: the one loaded, promoted by the
	// flow's first load
	var flow struct{ Version, Promoted string }
	p.eval(`fetch('/v1/flows/interview', {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('trellis.studio.key')}}).then(r => r.json())`, &flow)
	if v := p.text("#flow-version"); flow.Promoted == "" || v != "version "+flow.Version[:8]+" (promoted)" {
		t.Errorf("the flow's version shown: %q (the flow: %+v)", v, flow)
	}
	p.shot("graph")

	// the resume review runs inside screen_resume: expanded, its nodes
	// are drawn in a cluster
	var sub int
	for _, n := range g.Nodes {
		if n.Name == "screen_resume" && n.Subflow != nil {
			sub = len(n.Subflow.Nodes)
		}
	}
	p.click(`#graph .node[data-node="screen_resume"]`)
	p.wait(`document.getElementById('toggle-expand') !== null`)
	p.click("#toggle-expand")
	p.wait(`document.querySelector('#graph .cluster[data-cluster="screen_resume"]') !== null`)
	if n := p.count(`#graph .node[data-node^="screen_resume/"]`); sub == 0 || n != sub {
		t.Errorf("the expanded subflow draws %d nodes, it has %d", n, sub)
	}

	// a node's settings, writes, reads and prompt
	p.click(`#graph .node[data-node="greeting"]`)
	p.wait(`document.querySelector('#panel-node h2').textContent.startsWith('greeting ') && document.querySelector('#node-rendered pre') !== null`)
	if set := p.text("#node-settings"); !strings.Contains(set, "prompt: interview/greeting") {
		t.Errorf("greeting's settings: %q", set)
	}
	if w := p.text("#node-writes"); !strings.Contains(w, "next_message") {
		t.Errorf("greeting writes %q", w)
	}
	if r := p.text("#node-reads"); r == "—" || r == "" {
		t.Errorf("greeting reads %q", r)
	}
	if pr := p.text("#node-prompt"); !strings.Contains(pr, "---") {
		t.Errorf("greeting's prompt file: %q", pr)
	}
	p.shot("node")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (p *page) mustGraph(flow string) map[string]any {
	p.t.Helper()
	var g map[string]any
	p.eval(`fetch('/v1/flows/`+flow+`/graph', {headers: {Authorization: 'Bearer ' + sessionStorage.getItem('trellis.studio.key')}}).then(r => r.json())`, &g)
	return g
}

// Typing an error into the flow's YAML shows its diagnostic at its line
// as it is typed, with the suggestion as a fix; taking the fix clears
// it; a valid edit redraws the graph from the edited text and saves.
func TestStudioEditsWithDiagnostics(t *testing.T) {
	dir := project(t)
	s := start(t, nil, nil, filepath.Join(dir, "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "interview")
	p.click("#tab-editor")
	p.wait(`document.querySelector('#editor .cm-content') !== null && document.querySelector('#diagnostics li.ok') !== null`)
	// the cursor after record_question in the edge from question
	var line int
	p.eval(`(() => { const v = trellisStudio.editor.view, text = v.state.doc.toString();
		const at = text.indexOf('- {from: question, to: record_question}') + '- {from: question, to: record_question'.length;
		v.dispatch({selection: {anchor: at}, scrollIntoView: true}); v.focus(); return v.state.doc.lineAt(at).number; })()`, &line)
	if err := p.b.InsertText(p.ctx, "x"); err != nil {
		t.Fatal(err)
	}
	p.wait(`document.querySelector('#diagnostics li[data-code="G001"]') !== null && document.querySelector('#editor .cm-lintRange-error') !== null`)
	if got := p.text(`#diagnostics li[data-code="G001"]`); !strings.Contains(got, "flows/interview.yaml:"+strconv.Itoa(line)+":") || !strings.Contains(got, "record_questionx") {
		t.Errorf("the diagnostic says %q; want it at line %d", got, line)
	}
	// the editor marks the span on that line
	var marked int
	p.eval(`(() => { const v = trellisStudio.editor.view, e = document.querySelector('#editor .cm-lintRange-error');
		return v.state.doc.lineAt(v.posAtDOM(e)).number; })()`, &marked)
	if marked != line {
		t.Errorf("the editor marks line %d, want %d", marked, line)
	}
	if note := p.text("#graph-note"); !strings.Contains(note, "does not compile") {
		t.Errorf("graph note %q", note)
	}
	p.shot("diagnostic")
	p.click(`#diagnostics li[data-code="G001"] button.fix`)
	p.wait(`document.querySelector('#diagnostics li.ok') !== null && document.querySelector('#editor .cm-lintRange-error') === null`)

	// a valid edit: a node described anew, drawn from the edited text,
	// then saved and reloaded
	p.eval(`(() => { const v = trellisStudio.editor.view, text = v.state.doc.toString();
		const key = 'Entry point for external data; counts the turn.';
		const at = text.indexOf(key); v.dispatch({selection: {anchor: at, head: at + key.length}}); v.focus(); return at; })()`, nil)
	if err := p.b.InsertText(p.ctx, "Reads the answer the studio sent."); err != nil {
		t.Fatal(err)
	}
	p.wait(`document.querySelector('#graph-note').textContent.includes('edited text') && trellisStudio.shownGraph.nodes[0].description === 'Reads the answer the studio sent.'`)
	p.click("#save")
	p.wait(`trellisStudio.saved && trellisStudio.saved.ok`)
	b, err := os.ReadFile(filepath.Join(dir, "flows/interview.yaml"))
	if err != nil || !strings.Contains(string(b), "description: Reads the answer the studio sent.") {
		t.Fatalf("the file after saving: %v", err)
	}
	f, err := p.client.Flow(p.ctx, "interview")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.Source, "Reads the answer the studio sent.") {
		t.Fatal("the server did not reload the saved flow")
	}
	p.shot("saved")
}

func candidate(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(root, "flows/examples/candidate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "interview_id")
	delete(v, "user_id")
	out, _ := json.Marshal(v)
	return string(out)
}

// A turn of the interview streams into the page: the running node is
// marked on the graph, the model's tokens appear as they come, and the
// timeline grows by the turn's checkpoints; forking from the second
// checkpoint makes a thread whose state is that checkpoint's, with the
// greeting's run it was in the middle of, resumed from the page.
func TestStudioStreamsATurnAndForks(t *testing.T) {
	env, thinking := model(t)
	s := start(t, env, nil, filepath.Join(project(t), "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "interview")

	// a thread from the form: the fields with no default, the resume
	p.click("#tab-run")
	p.typeInto("#new-id", "ada")
	p.typeInto("#in-interview_id", "studio-1")
	p.typeInto("#in-user_id", "ada")
	p.typeInto("#new-values", candidate(t))
	p.click("#create")
	p.wait(`trellisStudio.thread && trellisStudio.thread.id === 'ada' && document.getElementById('say') !== null`)

	// the greeting: the interviewer speaks first
	p.click("#send")
	p.wait(`trellisStudio.run && trellisStudio.run.settled && document.querySelectorAll('#chat .msg.flow').length === 1`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the greeting's run: %s", run)
	}
	before := p.count("#timeline li")
	hist, err := p.client.History(p.ctx, "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	if before == 0 || before != len(hist) {
		t.Fatalf("the timeline shows %d checkpoints, the thread has %d", before, len(hist))
	}

	// a turn, streamed
	const answer = "I build data pipelines in Go and PostgreSQL at Northwind."
	p.typeInto("#say", answer)
	p.click("#send")
	// the node running as the tokens stream, read as it is seen (it may
	// end the next moment)
	var running string
	p.waitValue(`(() => { const n = document.querySelector('#graph .node.running');
		return trellisStudio.run.active && n && trellisStudio.run.tokens.length > 0 ? n.dataset.node : null; })()`, &running)
	if tokens := p.text("#tokens"); tokens == "" {
		t.Error("no tokens are shown while the run goes on")
	}
	p.shot("streaming")
	p.wait(`trellisStudio.run.settled`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the turn's run: %s", run)
	}
	var tokenEvents, steps int
	p.eval(`trellisStudio.run.tokenEvents`, &tokenEvents)
	p.eval(`trellisStudio.run.steps.length`, &steps)
	hist, err = p.client.History(p.ctx, "ada", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.wait(`document.querySelectorAll('#timeline li').length === ` + strconv.Itoa(len(hist)))
	after := p.count("#timeline li")
	st, err := p.client.State(p.ctx, "ada", 0)
	if err != nil {
		t.Fatal(err)
	}
	question, _ := st.Values["next_message"].(string)
	t.Logf("the turn ran %s while it was shown running, in %d steps, streamed in %d token events", running, steps, tokenEvents)
	switch {
	case running == "":
		t.Error("no node was marked running")
	case tokenEvents == 0:
		// (a reply's words that come together are one event)
		t.Error("no token events: the model's replies did not stream")
	case after <= before || after-before != steps+1:
		// the turn's input, then one checkpoint per step
		t.Errorf("the timeline went from %d to %d checkpoints over %d steps", before, after, steps)
	case !strings.Contains(p.text("#chat"), answer) || question == "" || !strings.Contains(p.text("#chat"), question):
		t.Errorf("the conversation shows %q (the flow asked %q)", p.text("#chat"), question)
	}
	p.shot("turn")

	// fork from the second checkpoint
	p.click("#tab-history")
	p.click(`#timeline li[data-seq="2"]`)
	p.wait(`document.getElementById('fork') !== null && document.querySelector('#checkpoint h2').textContent === 'Checkpoint #2'`)
	p.shot("checkpoint")
	p.click("#fork")
	p.wait(`trellisStudio.forked && trellisStudio.thread && trellisStudio.thread.id === trellisStudio.forked.thread && document.querySelectorAll('#timeline li').length > 0`)
	var forked string
	p.eval(`trellisStudio.forked.thread`, &forked)
	at2, err := p.client.State(p.ctx, "ada", 2)
	if err != nil {
		t.Fatal(err)
	}
	now, err := p.client.State(p.ctx, forked, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(at2.Values, now.Values) {
		t.Errorf("the fork's state differs from checkpoint 2's:\n%v\n%v", at2.Values, now.Values)
	}
	p.shot("fork")

	// the fork carries the greeting's run, which it was in the middle of:
	// it takes no message until the run is resumed
	p.click("#tab-run")
	p.wait(`document.getElementById('resume') !== null && document.querySelector('#send[disabled]') !== null`)
	p.click("#resume")
	p.wait(`trellisStudio.run && trellisStudio.run.settled && document.querySelector('#send:not([disabled])') !== null`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the fork's greeting, resumed: %s", run)
	}

	// a turn on the fork, cancelled while the model thinks (it answers
	// nothing until the cancel is pressed): the thread is left part way,
	// and resumed from the page
	p.click("#tab-run")
	thinking.close()
	p.typeInto("#say", "Hello from the fork.")
	p.click("#send")
	p.wait(`trellisStudio.run.active && trellisStudio.run.id && document.querySelector('#graph .node.running') !== null`)
	for thinking.held() == 0 {
		select {
		case <-p.ctx.Done():
			t.Fatal("the turn did not ask the model")
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.click("#cancel")
	p.wait(`trellisStudio.run.settled`)
	thinking.open()
	var runID string
	p.eval(`trellisStudio.run.id`, &runID)
	run, err := p.client.Run(p.ctx, forked, runID)
	if err != nil {
		t.Fatal(err)
	}
	if st := p.text("#run-status"); run.Status != api.RunCancelled || !strings.HasPrefix(st, "cancelled") {
		t.Fatalf("after cancelling, the run is %s and the page says %q", run.Status, st)
	}
	p.wait(`document.getElementById('resume') !== null`)
	p.shot("cancelled")
	p.click("#resume")
	p.wait(`trellisStudio.run.settled && trellisStudio.run.id !== '` + runID + `'`)
	if st := p.text("#run-status"); !strings.HasPrefix(st, "succeeded") {
		t.Errorf("the resumed run: %q", st)
	}
	if th, err := p.client.Thread(p.ctx, forked); err != nil || th.Status != api.ThreadIdle {
		t.Errorf("the fork after resuming: %v %+v", err, th)
	}
}

// A paused run of the approval flow asks its question in the page; the
// answer typed there outlives the page drawing the thread anew, resumes
// the run and it completes. Pressing Answer with nothing typed starts no
// run (it would only ask again); nor does pressing it while the page
// moves to another thread (the server slow to answer): a thread's
// questions are answered on that thread only, and what was typed for
// them is there when it is shown again.
func TestStudioAnswersAnInterrupt(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "approval")
	p.click("#tab-run")
	p.typeInto("#new-id", "other")
	p.click("#create")
	p.wait(`trellisStudio.thread && trellisStudio.thread.id === 'other' && document.getElementById('run-form') !== null`)
	p.click("#new-thread")
	p.wait(`!trellisStudio.thread && document.getElementById('new-id') !== null`)
	p.typeInto("#new-id", "shortlist")
	p.click("#create")
	p.wait(`trellisStudio.thread && trellisStudio.thread.id === 'shortlist' && document.getElementById('run-form') !== null`)
	p.typeInto("#in-candidate", "Ada")
	p.typeInto("#in-score", "82")
	p.click("#run")
	p.wait(`document.querySelector('#interrupts [data-interrupt="recruiter"]') !== null && document.querySelector('#graph .node.waiting[data-node="recruiter"]') !== null`)
	if q := p.text(`#interrupts [data-interrupt="recruiter"] pre`); !strings.Contains(q, "Advance Ada?") {
		t.Errorf("the question shown: %q", q)
	}
	p.shot("interrupt")
	paused := p.runID()
	p.click("#answer")
	p.wait(`document.getElementById('status').classList.contains('error')`)
	if st := p.text("#status"); !strings.Contains(st, "type an answer") || p.runID() != paused {
		t.Errorf("Answer with nothing typed: the status says %q, the run shown is %q (was %q)", st, p.runID(), paused)
	}
	if runs, err := p.client.Runs(p.ctx, "shortlist"); err != nil || len(runs) != 1 {
		t.Fatalf("Answer with nothing typed started a run: %v %+v", err, runs)
	}
	// another thread chosen, its state held back by a slow server: the
	// page shows shortlist's question still, and Answer must not send it
	// to the other thread
	release, err := p.b.Hold(p.ctx, "*/v1/threads/other/state*")
	if err != nil {
		t.Fatal(err)
	}
	p.selectThread("other")
	p.wait(`trellisStudio.thread.id === 'other'`)
	for p.b.Held() == 0 {
		select {
		case <-p.ctx.Done():
			t.Fatal("the page asked for the other thread's state, and it was not held")
		case <-time.After(20 * time.Millisecond):
		}
	}
	const answer = `{"approve": true, "note": "strong"}`
	p.typeInto("#answer-recruiter", answer)
	p.click("#answer")
	p.wait(`document.getElementById('status').classList.contains('error')`)
	// (the page shows no run: shortlist's is not the other thread's)
	if st := p.text("#status"); !strings.Contains(st, "shortlist's") || p.runID() != "" {
		t.Errorf("Answer while another thread is on its way: the status says %q, the run shown is %q", st, p.runID())
	}
	for _, th := range []string{"other", "shortlist"} {
		if runs, err := p.client.Runs(p.ctx, th); err != nil || len(runs) != map[string]int{"other": 0, "shortlist": 1}[th] {
			t.Fatalf("Answer while another thread is on its way: %s's runs: %v %+v", th, err, runs)
		}
	}
	if err := release(p.ctx); err != nil {
		t.Fatal(err)
	}
	p.wait(`trellisStudio.state && trellisStudio.state.thread === 'other' && document.querySelector('#interrupts .interrupt') === null`)
	p.selectThread("shortlist")
	p.wait(`trellisStudio.state && trellisStudio.state.thread === 'shortlist' && document.getElementById('answer-recruiter') !== null`)
	if v := p.value("#answer-recruiter"); v != answer {
		t.Fatalf("the answer typed, after another thread was shown: %q", v)
	}
	p.refresh()
	if v := p.value("#answer-recruiter"); v != answer {
		t.Fatalf("the answer typed, after the thread is drawn anew: %q", v)
	}
	p.click("#answer")
	p.waitRunAfter(paused, `document.querySelector('#interrupts .interrupt') === null`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the resumed run: %s", run)
	}
	runs, err := p.client.Runs(p.ctx, "shortlist")
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.client.State(p.ctx, "shortlist", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Status != api.RunSucceeded || st.Values["approved"] != true || !strings.HasPrefix(st.Values["letter"].(string), "Dear Ada, we would like") {
		t.Fatalf("after the answer: runs %+v, state %v", runs, st.Values)
	}
	if n := p.count(`#graph .node.ran[data-node="invite"]`); n != 1 {
		t.Errorf("invite is not marked as run")
	}
	p.shot("answered")
}

// A run of the expenses flow pauses inside its map's items (their
// subflow asks): the page lists every question with its path, and its
// id; answering one resumes that item while the other keeps waiting; the
// other's subflow thread opens from its question, paused at the asking
// node; answering it completes the run.
func TestStudioAnswersNestedInterrupts(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "expenses")
	p.click("#tab-run")
	p.typeInto("#new-id", "claims")
	p.click("#create")
	p.wait(`trellisStudio.thread && trellisStudio.thread.id === 'claims' && document.getElementById('run-form') !== null`)
	p.typeInto("#in-claims", `[{"who": "Ada", "amount": 250}, {"who": "Bo", "amount": 40}, {"who": "Cy", "amount": 900}]`)
	p.click("#run")
	ada, cy := `#interrupts [data-interrupt="claims[0]/manager"]`, `#interrupts [data-interrupt="claims[2]/manager"]`
	p.wait(`document.querySelector('` + ada + `') !== null && document.querySelector('` + cy + `') !== null && document.querySelector('#graph .node.waiting[data-node="claims"]') !== null`)
	if q := p.text(cy + " pre"); !strings.Contains(q, "Approve Cy's claim of 900?") {
		t.Errorf("Cy's question: %q", q)
	}
	var cyID string
	p.eval(`document.querySelector('`+cy+`').dataset.id`, &cyID)
	if !strings.HasPrefix(cyID, "claims[2]:") || !strings.HasSuffix(cyID, "|manager") || !strings.Contains(p.text(cy), cyID) {
		t.Errorf("Cy's question's id: %q in %q", cyID, p.text(cy))
	}
	p.shot("two-questions")
	first := p.runID()
	p.typeInto("#answer-claims-2-manager", `{"approve": false, "note": "over budget"}`)
	p.click("#answer")
	p.waitRunAfter(first, `document.querySelector('`+cy+`') === null && document.querySelector('`+ada+`') !== null`)
	st, err := p.client.State(p.ctx, "claims", 0)
	if err != nil || len(st.Interrupts) != 1 || st.Interrupts[0].Path != "claims[0]/manager" {
		t.Fatalf("after Cy's answer: %+v %v", st, err)
	}
	// Ada's subflow, paused at its manager
	p.click(ada + " button.child-thread")
	p.wait(`document.querySelector('#timeline') !== null && document.querySelector('#timeline').dataset.ns.startsWith('claims[0]:')`)
	if h := p.text("#panel-history"); !strings.Contains(h, "Subflow claims[0]:") {
		t.Errorf("the child's history: %q", h)
	}
	// back at the thread (its history and its questions read anew and
	// drawn), Ada's question is answered; the answer outlives another
	// drawing of the thread, and is what the run is resumed with
	p.click("#back-to-thread")
	p.wait(`document.querySelector('#timeline').dataset.ns === '' && !document.getElementById('back-to-thread')`)
	p.click("#tab-run")
	p.wait(`document.querySelector('` + ada + ` #answer-claims-0-manager') !== null && document.querySelector('` + cy + `') === null`)
	second := p.runID()
	var adaID string
	p.eval(`document.querySelector('`+ada+`').dataset.id`, &adaID)
	p.typeInto("#answer-claims-0-manager", `true`)
	p.refresh()
	if v := p.value("#answer-claims-0-manager"); v != "true" {
		t.Fatalf("Ada's answer, after the thread is drawn anew: %q", v)
	}
	p.click("#answer")
	p.waitRunAfter(second, `document.querySelector('#interrupts .interrupt') === null`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the last run: %s", run)
	}
	if runs, err := p.client.Runs(p.ctx, "claims"); err != nil || len(runs) != 3 || !reflect.DeepEqual(runs[0].Answers, map[string]any{adaID: true}) {
		t.Errorf("the runs: %v %+v", err, runs)
	}
	st, err = p.client.State(p.ctx, "claims", 0)
	if err != nil || len(st.Interrupts) != 0 || st.Values["approved_total"] != 290 {
		t.Fatalf("the end: %+v %v", st, err)
	}
	decisions := st.Values["decisions"].([]any)
	if len(decisions) != 3 || decisions[2].(map[string]any)["note"] != "over budget" {
		t.Fatalf("decisions %v", decisions)
	}
	p.shot("nested-answered")
}

// A key of another tenant, signed in on the same studio, sees none of
// the studio's threads: not in the list, and not by name.
func TestStudioOtherTenantSeesNothing(t *testing.T) {
	pg := storetest.Postgres(t)
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", pg)
	p := open(t, s, "approval")
	if _, err := p.client.CreateThread(p.ctx, api.CreateThread{ID: "private", Flow: "approval"}); err != nil {
		t.Fatal(err)
	}
	p.eval(`location.hash = 'flow=approval&thread=private'; location.reload(); true`, nil)
	p.wait(`window.trellisStudio && trellisStudio.ready && trellisStudio.thread && trellisStudio.thread.id === 'private'`)

	other := trellisCLI(t, "keys", "create", "--tenant", "globex", "--store", pg)
	p.click("#sign-out")
	p.wait(`document.getElementById('sign-in').open`)
	p.typeInto("#key", other)
	p.click("#sign-in-button")
	p.wait(`trellisStudio.ready && trellisStudio.flow !== null && trellisStudio.session !== null`)
	if n := p.count("#thread option"); n != 1 {
		t.Errorf("another tenant's thread list has %d entries", n)
	}
	p.eval(`location.hash = 'flow=approval&thread=private'; location.reload(); true`, nil)
	p.wait(`window.trellisStudio && trellisStudio.ready && document.getElementById('status').classList.contains('error')`)
	if st := p.text("#status"); !strings.Contains(st, "not_found") {
		t.Errorf("opening another tenant's thread says %q", st)
	}
	if n := p.count("#timeline li"); n != 0 {
		t.Errorf("another tenant sees %d checkpoints", n)
	}
	list, err := api.NewClient(s.base, other).Threads(p.ctx, api.ThreadQuery{})
	if err != nil || len(list.Threads) != 0 {
		t.Errorf("another tenant's threads: %v %+v", err, list)
	}
	p.shot("other-tenant")
}

// With its flows directory read-only (a read-only bind mount in a mount
// namespace of its own), the studio on the embedded store shows and
// checks the flows, and refuses to save with a message that says why.
func TestStudioReadOnlyFlows(t *testing.T) {
	dir := project(t)
	flows := filepath.Join(dir, "flows")
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatal("unshare (util-linux) is needed to mount the flows read-only: apt-get install util-linux")
	}
	wrap := []string{unshare, "--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		wrap = append(wrap, "--map-root-user")
	}
	wrap = append(wrap, "sh", "-c", `mount --bind -o ro "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"`, flows)
	work := t.TempDir()
	s := start(t, nil, wrap, flows, "--store", "sqlite:"+filepath.Join(work, "trellis.db"))
	p := open(t, s, "approval")
	p.click("#tab-editor")
	p.wait(`document.getElementById('read-only') !== null`)
	if b := p.text("#read-only"); !strings.Contains(b, "read-only") || !strings.Contains(b, "flows/examples") {
		t.Errorf("the editor's banner: %q", b)
	}
	p.eval(`(() => { const v = trellisStudio.editor.view, text = v.state.doc.toString();
		const at = text.indexOf('The recruiter approves or not, with a note.');
		v.dispatch({selection: {anchor: at}, scrollIntoView: true}); v.focus(); return at; })()`, nil)
	if err := p.b.InsertText(p.ctx, "Quickly, "); err != nil {
		t.Fatal(err)
	}
	p.wait(`Object.keys(trellisStudio.edits).length === 1 && !trellisStudio.pending && document.querySelector('#diagnostics li.ok') !== null`)
	p.click("#save")
	p.wait(`trellisStudio.saved !== null`)
	msg := p.text("#save-result")
	if !strings.Contains(msg, "flows_read_only") || !strings.Contains(msg, "read-only") {
		t.Errorf("saving says %q", msg)
	}
	b, err := os.ReadFile(filepath.Join(flows, "examples/approval.yaml"))
	if err != nil || strings.Contains(string(b), "Quickly,") {
		t.Fatalf("the read-only file was written: %v", err)
	}
	// the flows still run
	if _, err := p.client.CreateThread(p.ctx, api.CreateThread{ID: "r", Flow: "greet"}); err != nil {
		t.Fatal(err)
	}
	if run, err := p.client.RunWait(p.ctx, "r", api.StartRun{Input: map[string]any{"name": "Ada"}}); err != nil || run.Status != api.RunSucceeded {
		t.Fatalf("a run: %v %+v", err, run)
	}
	p.shot("read-only")
}

// A subflow's thread is reached from the checkpoint of the step that ran
// it; the state is edited there (update) as a node would write it.
func TestStudioOpensASubflowThreadAndUpdates(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "interview")
	var values map[string]any
	if err := json.Unmarshal([]byte(candidate(t)), &values); err != nil {
		t.Fatal(err)
	}
	values["interview_id"], values["user_id"], values["review_resume"] = "studio-2", "ada", true
	if _, err := p.client.CreateThread(p.ctx, api.CreateThread{ID: "reviewed", Flow: "interview", Values: values}); err != nil {
		t.Fatal(err)
	}
	if run, err := p.client.RunWait(p.ctx, "reviewed", api.StartRun{}); err != nil || run.Status != api.RunSucceeded {
		t.Fatalf("the greeting: %v %+v", err, run)
	}
	p.eval(`location.hash = 'flow=interview&thread=reviewed'; location.reload(); true`, nil)
	p.wait(`window.trellisStudio && trellisStudio.ready && trellisStudio.thread && trellisStudio.thread.id === 'reviewed' && trellisStudio.checkpoints.length > 0`)
	var seq int
	p.eval(`trellisStudio.checkpoints.find(c => (c.writers || []).some(w => w.node === 'screen_resume')).seq`, &seq)
	p.click("#tab-history")
	p.click(fmt.Sprintf(`#timeline li[data-seq="%d"]`, seq))
	p.wait(`document.querySelector('#checkpoint .subflow-link') !== null`)
	var ns string
	p.eval(`document.querySelector('#checkpoint .subflow-link').dataset.ns`, &ns)
	p.click("#checkpoint .subflow-link")
	child, err := p.client.History(p.ctx, "reviewed", map[string][]string{"ns": {ns}, "limit": {"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	p.wait(`document.querySelector('#timeline').dataset.ns === '` + ns + `' && document.querySelectorAll('#timeline li').length === ` + strconv.Itoa(len(child)))
	if h := p.text("#panel-history strong"); !strings.Contains(h, "Subflow "+ns) {
		t.Errorf("the history's heading: %q", h)
	}
	p.click(`#timeline li[data-seq="2"]`)
	p.wait(`document.getElementById('checkpoint-state') !== null`)
	p.shot("subflow-thread")
	p.click("#back-to-thread")
	p.wait(`document.querySelector('#timeline').dataset.ns === '' && document.getElementById('update') !== null`)

	// update: greeting's words, corrected by hand; what is typed outlives
	// the page drawing the thread anew
	p.click("#update summary")
	p.eval(`(() => { const s = document.getElementById('update-as'); s.value = 'greeting'; s.dispatchEvent(new Event('change')); return true; })()`, nil)
	const edit = `{"next_message": "Hello again, Ada."}`
	p.typeInto("#update-values", edit)
	p.click("#tab-run")
	p.refresh()
	p.click("#tab-history")
	p.wait(`document.getElementById('update') !== null`)
	if open, as, v := p.count("#update[open]"), p.value("#update-as"), p.value("#update-values"); open != 1 || as != "greeting" || v != edit {
		t.Fatalf("the edit after the thread is drawn anew: open %d, as %q, values %q", open, as, v)
	}
	p.click("#update-button")
	p.wait(`trellisStudio.state && trellisStudio.state.values.next_message === 'Hello again, Ada.'`)
	st, err := p.client.State(p.ctx, "reviewed", 0)
	if err != nil || st.Values["next_message"] != "Hello again, Ada." {
		t.Fatalf("the state after the update: %v %v", err, st)
	}
	h, _ := p.client.History(p.ctx, "reviewed", nil)
	if h[0].Source != "update" || len(h[0].Writers) != 1 || h[0].Writers[0].Node != "greeting" {
		t.Errorf("the update's checkpoint: %+v", h[0])
	}
}

// The studio is keyboard usable: the tabs move with the arrow keys, a
// node is reached with Tab and opened with Enter, and the editor
// completes keys from the flow format's schema.
func TestStudioKeyboardAndCompletion(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", "memory")
	p := open(t, s, "approval")
	p.eval(`document.getElementById('tab-run').focus(); true`, nil)
	if err := p.b.Press(p.ctx, "ArrowRight", 0); err != nil {
		t.Fatal(err)
	}
	p.wait(`document.activeElement.id === 'tab-history' && !document.getElementById('panel-history').classList.contains('hidden')`)
	p.eval(`document.getElementById('expand').focus(); true`, nil)
	if err := p.b.Press(p.ctx, "Tab", 0); err != nil {
		t.Fatal(err)
	}
	p.wait(`document.activeElement && document.activeElement.classList.contains('node')`)
	var focused string
	p.eval(`document.activeElement.dataset.node`, &focused)
	if err := p.b.Press(p.ctx, "Enter", 0); err != nil {
		t.Fatal(err)
	}
	p.wait(`!document.getElementById('panel-node').classList.contains('hidden') && document.querySelector('#panel-node h2') !== null`)
	if h := p.text("#panel-node h2"); !strings.HasPrefix(h, focused) {
		t.Errorf("Enter on node %s opened %q", focused, h)
	}

	// completion: a key of an interrupt node's settings
	p.click("#tab-editor")
	p.wait(`document.querySelector('#editor .cm-content') !== null`)
	p.eval(`(() => { const v = trellisStudio.editor.view, text = v.state.doc.toString();
		const at = text.indexOf('    kind: interrupt') + '    kind: interrupt'.length;
		v.dispatch({selection: {anchor: at}, scrollIntoView: true}); v.focus(); return at; })()`, nil)
	if err := p.b.Press(p.ctx, "Enter", 0); err != nil {
		t.Fatal(err)
	}
	if err := p.b.InsertText(p.ctx, "interrupt_be"); err != nil {
		t.Fatal(err)
	}
	// the editor takes Enter for the completion only once its list has
	// been shown a moment (CodeMirror's interactionDelay, 75 ms: an Enter
	// typed as the list appears breaks the line), so the test presses it
	// as a person would, the list seen for a while
	p.wait(`(() => {
		const shown = [...document.querySelectorAll('.cm-tooltip-autocomplete li')].some(li => li.textContent.includes('interrupt_before'));
		if (!shown) { window.listSeen = 0; return false; }
		window.listSeen = window.listSeen || performance.now();
		return performance.now() - window.listSeen >= 150; })()`)
	p.shot("completion")
	if err := p.b.Press(p.ctx, "Enter", 0); err != nil {
		t.Fatal(err)
	}
	var line string
	p.eval(`(() => { const v = trellisStudio.editor.view; return v.state.doc.lineAt(v.state.selection.main.head).text; })()`, &line)
	if strings.TrimSpace(line) != "interrupt_before:" {
		t.Errorf("the completed line: %q", line)
	}
}

// trellis serve serves the same studio at /studio, signed in with an API
// key.
func TestServeServesTheStudio(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "trellis.db")
	key := trellisCLI(t, "keys", "create", "--tenant", "acme", "--store", db)
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--flows", filepath.Join(project(t), "flows"), "--store", db, "--addr", addr)
	cmd.Env = append(os.Environ(), "TRELLIS_AS_MAIN=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	c := api.NewClient("http://"+addr, key)
	for c.Ready(ctx) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("trellis serve is not ready:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	b := browser.Chromium(t, 1280, 800)
	if err := b.Navigate(ctx, "http://"+addr+"/studio#flow=greet"); err != nil {
		t.Fatal(err)
	}
	p := &page{t: t, b: b, ctx: ctx, s: &studio{stderr: &stderr}, client: c, name: "ServeServesTheStudio"}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page and chromium said:\n%s\ntrellis serve said:\n%s", b.Log(), stderr.String())
		}
	})
	p.wait(`document.getElementById('sign-in').open`)
	p.typeInto("#key", key)
	p.click("#sign-in-button")
	p.wait(`window.trellisStudio && trellisStudio.ready && trellisStudio.flow && trellisStudio.flow.name === 'greet' && document.querySelectorAll('#graph .node').length === 1`)
	p.shot("signed-in")
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// trellis studio listens on loopback, signs a page in once with the
// token it prints, and revokes the key it handed out when it stops; a
// flows directory that is not there is a usage error.
func TestStudioCommand(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "trellis.db")
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", db)
	token := s.token
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	anon := api.NewClient(s.base, "")
	sess, err := anon.StudioSignIn(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.StudioSignIn(ctx, token); !api.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("the token signed in twice: %v", err)
	}
	c := api.NewClient(s.base, sess.Key)
	if _, err := c.Flows(ctx); err != nil || sess.Tenant != "studio" || sess.Admin || sess.Scope != "studio" || !sess.Edits || sess.Expires == nil {
		t.Fatalf("the studio's key: %v %+v", err, sess)
	}
	// least privilege: the studio's tenant, no key management
	if _, err := c.CreateKey(ctx, api.CreateKey{Tenant: "other"}); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("the studio's key made a key for another tenant: %v", err)
	}
	if _, err := c.Keys(ctx); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("the studio's key listed every tenant's keys: %v", err)
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Fatalf("trellis studio on SIGINT: %v\n%s", err, s.stderr)
	}
	keys := trellisCLI(t, "keys", "list", "--store", db)
	if !regexp.MustCompile(`(?m)^` + sess.KeyID + `\tstudio\tstudio\tstudio session\trevoked `).MatchString(keys) {
		t.Errorf("the studio's key after it stopped:\n%s", keys)
	}

	cmd := exec.Command(os.Args[0], "studio", filepath.Join(t.TempDir(), "none"), "--no-open", "--store", "memory")
	cmd.Env = append(os.Environ(), "TRELLIS_AS_MAIN=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "no such file or directory") {
		t.Errorf("a missing flows directory: %v\n%s", err, out)
	}
}

// The agent example's run shows its tool calls in the run's timeline, and
// its deletion waits on a form of the call: edited there, the resumed run
// calls the tool with the arguments the person gave.
func TestStudioApprovesAToolCall(t *testing.T) {
	var mu sync.Mutex
	var deleted []string
	samples := httptest.NewServer(mcptest.Handler(mcptest.Config{OnCall: func(tool string, args map[string]any) {
		if tool == "delete_note" {
			mu.Lock()
			deleted = append(deleted, fmt.Sprint(args["title"]))
			mu.Unlock()
		}
	}}))
	defer samples.Close()
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", "sqlite:"+filepath.Join(t.TempDir(), "s.db"))
	p := open(t, s, "agent")
	p.click("#tab-run")
	p.typeInto("#new-id", "trip")
	p.click("#create")
	p.wait(`trellisStudio.thread && trellisStudio.thread.id === 'trip' && document.getElementById('run-form') !== null`)
	p.typeInto("#in-question", "What should I pack?")
	p.typeInto("#in-city", "Oslo")
	p.typeInto("#in-note", "old plans")
	cfg, _ := json.Marshal(`{"samples_url": "` + samples.URL + `"}`)
	p.eval(`document.getElementById('config').value = `+string(cfg)+`, true`, nil)
	p.click("#run")
	p.wait(`document.querySelector('#interrupts .interrupt[data-approval] fieldset[data-tool="delete_note"]') !== null`)
	p.shot("approval")
	// the decision and the arguments, as a person gives them: they
	// outlive the page drawing the thread anew
	call := `#interrupts fieldset[data-tool="delete_note"]`
	p.click(call + ` input[data-decision="edit"]`)
	p.click(call + ` textarea`)
	p.eval(`document.activeElement.select(), true`, nil)
	if err := p.b.InsertText(p.ctx, `{"title": "older plans"}`); err != nil {
		t.Fatal(err)
	}
	p.refresh()
	if n, v := p.count(call+` input[data-decision="edit"]:checked`), p.value(call+` textarea`); n != 1 || v != `{"title": "older plans"}` {
		t.Fatalf("after the thread is drawn anew, the edit is chosen %d times, with the arguments %q", n, v)
	}
	// (the page sends the run options again with the resume)
	p.eval(`document.getElementById('config').value = `+string(cfg)+`, true`, nil)
	paused := p.runID()
	p.click("#answer")
	p.waitRunAfter(paused, `true`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the resumed run: %s", run)
	}
	p.wait(`document.querySelector('#interrupts .interrupt') === null`)
	for _, tool := range []string{"get_weather", "trip_note", "word_count", "delete_note"} {
		if n := p.count(`#steps li.tool-call[data-tool="` + tool + `"][data-status="done"]`); n != 1 {
			t.Errorf("the timeline shows %d ended calls of %s", n, tool)
		}
	}
	if a := p.text(`#steps li.tool-call[data-tool="delete_note"] .tool-approval`); a != "edited" {
		t.Errorf("delete_note's approval in the timeline: %q", a)
	}
	p.shot("answered")
	mu.Lock()
	defer mu.Unlock()
	if len(deleted) != 1 || deleted[0] != "older plans" {
		t.Fatalf("the notes server deleted %v", deleted)
	}
	st, err := p.client.State(p.ctx, "trip", 0)
	if err != nil || len(st.Values["calls"].([]any)) != 4 {
		t.Fatalf("the thread's calls: %+v %v", st, err)
	}
}

// A studio killed with SIGKILL cannot revoke its page's key: the next
// studio on the same store sweeps it once the dead one's heartbeat is
// gone, and the key is refused from then on.
func TestStudioKeyGoneAfterAKill(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "trellis.db")
	flows := filepath.Join(project(t), "flows")
	s := start(t, nil, nil, flows, "--store", db)
	token := s.token
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sess, err := api.NewClient(s.base, "").StudioSignIn(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = s.cmd.Wait()
	if keys := trellisCLI(t, "keys", "list", "--store", db); !strings.Contains(keys, sess.KeyID+"\tstudio\tstudio\tstudio session\tactive until") {
		t.Fatalf("the killed studio's key, before the next start:\n%s", keys)
	}
	again := start(t, nil, nil, flows, "--store", db)
	c := api.NewClient(again.base, sess.Key)
	for {
		_, err := c.Flows(ctx)
		if api.IsCode(err, api.CodeUnauthorized) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the killed studio's key still works on the next one: %v\n%s", err, again.stderr)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if keys := trellisCLI(t, "keys", "list", "--store", db); !regexp.MustCompile(`(?m)^` + sess.KeyID + `\tstudio\tstudio\tstudio session\trevoked `).MatchString(keys) {
		t.Errorf("the swept key:\n%s", keys)
	}
}

// Time travel from the page: a turn of the interview, a fork from its
// second checkpoint, an edit there continued from the page, whose steps
// show in the run and on the timeline; the fork made into a flow test,
// saved beside the flow, that passes offline; a replay from a checkpoint
// told the recorded replies (the model is not called).
func TestStudioForksEditsAndContinues(t *testing.T) {
	dir := project(t)
	env, calls := countedModel(t)
	s := start(t, env, nil, filepath.Join(dir, "flows"), "--store", storetest.Postgres(t))
	p := open(t, s, "interview")
	var values map[string]any
	if err := json.Unmarshal([]byte(candidate(t)), &values); err != nil {
		t.Fatal(err)
	}
	values["interview_id"], values["user_id"] = "studio-3", "grace"
	if _, err := p.client.CreateThread(p.ctx, api.CreateThread{ID: "ada", Flow: "interview", Values: values}); err != nil {
		t.Fatal(err)
	}
	if run, err := p.client.RunWait(p.ctx, "ada", api.StartRun{}); err != nil || run.Status != api.RunSucceeded {
		t.Fatalf("the greeting: %v %+v", err, run)
	}
	p.eval(`location.hash = 'flow=interview&thread=ada'; location.reload(); true`, nil)
	p.wait(`window.trellisStudio && trellisStudio.ready && trellisStudio.thread && trellisStudio.thread.id === 'ada' && trellisStudio.checkpoints.length > 2`)
	p.click("#tab-history")
	p.click(`#timeline li[data-seq="2"]`)
	p.wait(`document.querySelector('#checkpoint h2') && document.querySelector('#checkpoint h2').textContent === 'Checkpoint #2'`)
	// the checkpoint is marked on the graph: the step's node, and what was next
	p.wait(`document.querySelectorAll('#graph .node.at').length === 1 && document.querySelectorAll('#graph .node.next').length === 1`)
	var at, next string
	p.eval(`document.querySelector('#graph .node.at').dataset.node`, &at)
	p.eval(`document.querySelector('#graph .node.next').dataset.node`, &next)
	if at != "ingest_input" || next != "recall_questions" {
		t.Errorf("checkpoint 2 marks %s as its step and %s as next", at, next)
	}
	p.shot("checkpoint-marked")
	p.click("#fork")
	p.wait(`trellisStudio.forked && trellisStudio.thread && trellisStudio.thread.id === trellisStudio.forked.thread && trellisStudio.checkpoints.length === 1`)
	var forked string
	p.eval(`trellisStudio.forked.thread`, &forked)
	if th, err := p.client.Thread(p.ctx, forked); err != nil || th.Status != api.ThreadUnfinished {
		t.Fatalf("the fork: %v %+v", err, th)
	}
	// edit the fork's checkpoint and continue from there
	p.click("#tab-history")
	p.click(`#timeline li[data-seq="1"]`)
	p.wait(`document.querySelector('#checkpoint #update') !== null && document.getElementById('update-continue') !== null`)
	if o := p.text("#checkpoint-origin"); !strings.Contains(o, "forked from ada #2") {
		t.Errorf("the fork's checkpoint says it came from %q", o)
	}
	p.eval(`document.getElementById('update').open = true; document.getElementById('update-as').value = 'ingest_input'; true`, nil)
	p.typeInto("#update-values", `{"turn_count": 5}`)
	p.click("#update-continue")
	p.wait(`trellisStudio.run && trellisStudio.run.settled && trellisStudio.run.steps.length > 0`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the continued run: %s", run)
	}
	hist, err := p.client.History(p.ctx, forked, nil)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Source == "step" {
			steps = append(steps, hist[i].Writers[0].Node)
		}
	}
	if strings.Join(steps, " ") != "recall_questions initialize greeting finalize_turn" {
		t.Errorf("the fork's steps: %v", steps)
	}
	p.wait(`document.querySelectorAll('#steps li').length === ` + strconv.Itoa(len(steps)))
	p.click("#tab-history")
	p.wait(`document.querySelectorAll('#timeline li').length === ` + strconv.Itoa(len(hist)))
	if st, err := p.client.State(p.ctx, forked, 0); err != nil || st.Values["turn_count"] != 5 {
		t.Errorf("the fork's state after the edit and the run: %v %v", err, st)
	}
	p.shot("edited-and-continued")

	// the fork as a flow test, beside the flow
	p.click("#tab-run")
	p.click("#flow-test")
	p.wait(`trellisStudio.flowTest && trellisStudio.flowTest.saved`)
	var ft api.FlowTest
	p.eval(`trellisStudio.flowTest`, &ft)
	if !ft.Passed || !strings.Contains(ft.Text, "stop_after: 1") || !strings.Contains(ft.Text, "turn_count: 5") || ft.CassettePath == "" {
		t.Errorf("the flow test of the fork: %+v", ft)
	}
	p.shot("flow-test")
	out := trellisCLI(t, "test", "-v", filepath.Join(dir, ft.Path))
	if !strings.Contains(out, "ok   ") {
		t.Errorf("the saved flow test, offline:\n%s", out)
	}

	// a replay from the thread's second checkpoint, on recorded replies
	p.eval(`trellisStudio.thread = null; true`, nil)
	p.eval(`location.hash = 'flow=interview&thread=ada'; location.reload(); true`, nil)
	p.wait(`window.trellisStudio && trellisStudio.ready && trellisStudio.thread && trellisStudio.thread.id === 'ada'`)
	before := calls()
	p.click("#tab-history")
	p.click(`#timeline li[data-seq="2"]`)
	p.wait(`document.getElementById('replay') !== null`)
	p.click("#replay")
	p.wait(`trellisStudio.replayed && trellisStudio.run && trellisStudio.run.id === trellisStudio.replayed.run && trellisStudio.run.settled`)
	if run := p.text("#run-status"); !strings.HasPrefix(run, "succeeded") {
		t.Fatalf("the replay: %s", run)
	}
	if n := calls() - before; n != 0 {
		t.Errorf("the replay called the model %d times", n)
	}
	p.shot("replayed")
}

// countedModel is the scripted model of the interview, and a count of
// the calls it answered.
func countedModel(t *testing.T) ([]string, func() int) {
	b, err := os.ReadFile(filepath.Join(root, "flows/examples/interview.model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []llmtest.Rule
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(rules...)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return []string{"OPENAI_BASE_URL=" + ts.URL + "/v1", "OPENAI_API_KEY=sk-test", "TRELLIS_MODEL=scripted"}, func() int { return len(srv.Calls()) }
}

// axe runs axe-core (the version web/package-lock.json pins) on the page
// as it is, and fails on every serious or critical violation.
func (p *page) axe(view string) {
	p.t.Helper()
	src, err := os.ReadFile("web/node_modules/axe-core/axe.min.js")
	if err != nil {
		p.t.Fatalf("axe-core is not installed (make page installs the studio's npm packages): %v", err)
	}
	var loaded bool
	p.eval(`(() => { if (!window.axe) { `+string(src)+`
 } return !!window.axe; })()`, &loaded)
	if !loaded {
		p.t.Fatal("axe-core did not load in the page")
	}
	var violations []struct {
		ID     string `json:"id"`
		Impact string `json:"impact"`
		Help   string `json:"help"`
		Nodes  []struct {
			Target []any  `json:"target"`
			HTML   string `json:"html"`
		} `json:"nodes"`
	}
	p.eval(`axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
		nodes: v.nodes.slice(0, 5).map(n => ({target: n.target, html: n.html.slice(0, 160)}))})))`, &violations)
	for _, v := range violations {
		if v.Impact != "serious" && v.Impact != "critical" {
			p.t.Logf("%s: axe %s (%s): %s", view, v.ID, v.Impact, v.Help)
			continue
		}
		p.t.Errorf("%s: axe %s (%s): %s", view, v.ID, v.Impact, v.Help)
		for _, n := range v.Nodes {
			p.t.Errorf("    %v %s", n.Target, n.HTML)
		}
	}
}

// Every view of the studio has no serious accessibility violation by
// axe-core: the graph, a run paused for an answer, the history with a
// checkpoint, the editor with a diagnostic, a node, the state, and the
// sign-in dialog.
func TestStudioAccessibility(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", "memory")
	p := open(t, s, "approval")
	p.axe("graph")
	p.click("#tab-run")
	p.typeInto("#new-id", "a-thread-with-a-long-generated-id-0123456789abcdef")
	p.click("#create")
	p.wait(`trellisStudio.thread && document.getElementById('run-form') !== null`)
	p.typeInto("#in-candidate", "Ada")
	p.typeInto("#in-score", "82")
	p.click("#run")
	p.wait(`document.querySelector('#interrupts [data-interrupt="recruiter"]') !== null && trellisStudio.run.settled`)
	// the run waits for an answer: no new input meanwhile, and what was
	// typed stays
	if n := p.count(`#run[disabled]`); n != 1 {
		t.Errorf("the Run button while the run waits for an answer: %d disabled", n)
	}
	if v := p.text("#thread-summary"); !strings.Contains(v, "waiting for an answer") {
		t.Errorf("the thread's summary while it waits: %q", v)
	}
	// the header does not wrap at 1280 px
	var headerHeight float64
	p.eval(`document.querySelector('header').getBoundingClientRect().height`, &headerHeight)
	if headerHeight > 48 {
		t.Errorf("the header is %.0f px high: it wrapped", headerHeight)
	}
	p.axe("run")
	p.click("#tab-history")
	p.click(`#timeline li[data-seq="2"]`)
	p.wait(`document.getElementById('checkpoint-state') !== null`)
	p.axe("history")
	p.click("#tab-editor")
	p.wait(`document.querySelector('#editor .cm-content') !== null && document.querySelector('#diagnostics li') !== null`)
	p.axe("editor")
	p.click(`#graph .node[data-node="recruiter"]`)
	p.wait(`document.querySelector('#panel-node h2') !== null`)
	p.axe("node")
	p.click("#tab-state")
	p.wait(`document.getElementById('state-schema') !== null`)
	var overflow bool
	p.eval(`(() => { const t = document.getElementById('state-schema'); return t.getBoundingClientRect().right > document.getElementById('panel-state').getBoundingClientRect().right + 1; })()`, &overflow)
	if overflow {
		t.Error("the state table overflows its panel")
	}
	p.axe("state")
	// switching flow leaves Expand subflows off
	p.click("#expand")
	p.wait(`document.getElementById('expand').getAttribute('aria-pressed') === 'true'`)
	p.eval(`(() => { const s = document.getElementById('flow'); s.value = 'greet'; s.dispatchEvent(new Event('change')); return true; })()`, nil)
	p.wait(`trellisStudio.flow && trellisStudio.flow.name === 'greet'`)
	if v := p.text("#expand"); p.count(`#expand[aria-pressed="false"]`) != 1 {
		t.Errorf("Expand subflows (%s) stays pressed after switching flow", v)
	}
	p.click("#sign-out")
	p.wait(`document.getElementById('sign-in').open`)
	p.axe("sign-in")
	p.shot("accessible")
}

// The script and the schema are served gzipped to a client that takes
// it, and kept for good under the versioned address the page names them
// by; anything else revalidates.
func TestServedCompressedAndCached(t *testing.T) {
	srv := httptest.NewServer(studiopage.Handler())
	defer srv.Close()
	get := func(path string, gz bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip, deflate, br")
		} else {
			req.Header.Set("Accept-Encoding", "identity")
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	page := get("/studio", false)
	body, _ := io.ReadAll(page.Body)
	script := regexp.MustCompile(`<script src="(/studio/app\.js\?v=[0-9a-f]{16})"></script>`).FindStringSubmatch(string(body))
	schema := regexp.MustCompile(`<meta name="trellis-schema" content="(/studio/flow\.schema\.json\?v=[0-9a-f]{16})">`).FindStringSubmatch(string(body))
	if script == nil || schema == nil || page.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("the page names its files %v %v (cache %q)", script, schema, page.Header.Get("Cache-Control"))
	}
	for _, path := range []string{script[1], schema[1]} {
		plain := get(path, false)
		raw, _ := io.ReadAll(plain.Body)
		zipped := get(path, true)
		if zipped.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(zipped.Header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("%s: encoding %q vary %q", path, zipped.Header.Get("Content-Encoding"), zipped.Header.Get("Vary"))
		}
		zr, err := gzip.NewReader(zipped.Body)
		if err != nil {
			t.Fatal(err)
		}
		unzipped, _ := io.ReadAll(zr)
		n, _ := strconv.Atoi(zipped.Header.Get("Content-Length"))
		if !bytes.Equal(unzipped, raw) || len(raw) == 0 {
			t.Errorf("%s: the gzipped body is not the file", path)
		}
		if n == 0 || n*100/len(raw) > 40 {
			t.Errorf("%s: %d bytes gzipped of %d", path, n, len(raw))
		}
		if cc := zipped.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") || !strings.Contains(cc, "max-age=31536000") {
			t.Errorf("%s: Cache-Control %q", path, cc)
		}
		t.Logf("%s: %d bytes, %d gzipped", path, len(raw), n)
		// without its version, the browser revalidates, and hears 304
		bare := strings.Split(path, "?")[0]
		if cc := get(bare, true).Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("%s: Cache-Control %q", bare, cc)
		}
		req, _ := http.NewRequest("GET", srv.URL+bare, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		req.Header.Set("If-None-Match", zipped.Header.Get("ETag"))
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s revalidated: %d", bare, resp.StatusCode)
		}
	}
}

// Signing in from the file `trellis studio` writes leaves the one-time
// token in no address chromium records: its history database, written
// out when it closes, holds the studio's addresses but never the token
// (nor the key), while an address carrying a fragment the way a token
// was once delivered is recorded there, fragment and all; its caches
// and storage do not keep the token either. The file is gone once its
// token is spent, and reloading the page does not post it again.
func TestSignInLeavesNoTokenInHistory(t *testing.T) {
	s := start(t, nil, nil, filepath.Join(project(t), "flows"), "--store", "memory")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := browser.Chromium(t, 1280, 800)
	p := &page{t: t, b: b, ctx: ctx, s: s, name: "SignInLeavesNoTokenInHistory"}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page and chromium said:\n%s\ntrellis studio said:\n%s", b.Log(), s.stderr)
		}
	})
	u, err := url.Parse(s.file)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(u.Path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("the sign-in file's mode: %v", info.Mode().Perm())
	}
	if dir, err := os.Stat(filepath.Dir(u.Path)); err != nil || dir.Mode().Perm() != 0o700 {
		t.Errorf("the sign-in file's directory: %v %v", dir.Mode(), err)
	}
	p.signIn()
	var key string
	p.eval(`sessionStorage.getItem('trellis.studio.key')`, &key)
	if !strings.HasPrefix(key, "trk_") {
		t.Fatalf("the page's key: %q", key)
	}
	if _, err := api.NewClient(s.base, key).Flows(ctx); err != nil {
		t.Fatalf("the page's key: %v", err)
	}
	// the token is spent, and the page's address is the studio's own
	if _, err := api.NewClient(s.base, "").StudioSignIn(ctx, s.token); !api.IsCode(err, api.CodeUnauthorized) {
		t.Errorf("the file's token signed in again: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Dir(u.Path)); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the sign-in file is still there once its token is spent")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// reloading asks for the studio's page, not the form again
	if _, err := b.Call(ctx, "Page.reload", nil); err != nil {
		t.Fatal(err)
	}
	p.wait(`location.origin + location.pathname === '` + s.base + `/studio' && window.trellisStudio && trellisStudio.ready && trellisStudio.flow !== null`)
	// what the history check would see of a token in a fragment
	probe := "probe_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := b.Navigate(ctx, s.base+"/studio#token="+probe); err != nil {
		t.Fatal(err)
	}
	p.wait(`document.readyState === 'complete'`)
	if err := b.Quit(ctx); err != nil {
		t.Fatal(err)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(b.Profile(), "Default", "History")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT url FROM urls`)
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, u)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	t.Logf("chromium's history: %q", urls)
	var studio, probed bool
	for _, u := range urls {
		if strings.Contains(u, s.token) || strings.Contains(u, key) {
			t.Errorf("chromium's history holds the studio's token or key: %s", u)
		}
		studio = studio || strings.HasPrefix(u, s.base+"/studio")
		probed = probed || strings.Contains(u, probe)
	}
	// nor does any file of the profile (its caches, its storage) keep
	// the token, but for the log of the tabs it keeps to restore them,
	// which records a form's body with its entry as it is made (the page
	// replaces that entry at once; the token is spent by then)
	sessions := filepath.Join(b.Profile(), "Default", "Sessions")
	err = filepath.WalkDir(b.Profile(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && path == sessions {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return err
		}
		if bb, err := os.ReadFile(path); err != nil {
			return err
		} else if bytes.Contains(bb, []byte(s.token)) {
			t.Errorf("chromium's %s holds the token", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !studio || !probed {
		t.Errorf("chromium's history does not hold the studio's address (%v) or the probing fragment (%v): it proves nothing", studio, probed)
	}
}
