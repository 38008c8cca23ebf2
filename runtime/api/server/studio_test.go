package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
)

// A one-time studio token is exchanged once for a key of its tenant and
// of the studio's scope: it reaches that tenant's threads and edits the
// flows, but manages no keys, and sees no other tenant's; it lapses
// unless renewed, and the keys handed out are revoked when the studio
// ends.
func TestStudioSignIn(t *testing.T) {
	h := newHarness(t, "memory", nil)
	token, err := h.srv.StudioToken("acme", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	anon := api.NewClient(h.base, "")
	anon.HTTP = h.http
	sess, err := anon.StudioSignIn(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Tenant != "acme" || sess.Admin || !sess.Edits || sess.Scope != "studio" || sess.Expires == nil || !strings.HasPrefix(sess.Key, "trk_") {
		t.Fatalf("session %+v", sess)
	}
	if _, err := anon.StudioSignIn(ctx, token); !api.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("a token exchanged twice: %v", err)
	}
	// the key is acme's: it sees acme's thread, not globex's
	interviewless(t, h, "mine")
	studio := api.NewClient(h.base, sess.Key)
	studio.HTTP = h.http
	if _, err := studio.Thread(ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.globex.CreateThread(ctx, api.CreateThread{ID: "theirs", Flow: "greet"}); err != nil {
		t.Fatal(err)
	}
	if _, err := studio.Thread(ctx, "theirs"); !api.IsCode(err, api.CodeNotFound) {
		t.Errorf("the studio's key reads another tenant's thread: %v", err)
	}
	// it manages no keys: it can neither make one (for any tenant) nor
	// list them, nor rotate the voice signing key
	if _, err := studio.CreateKey(ctx, api.CreateKey{Tenant: "other"}); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("the studio's key made a key: %v", err)
	}
	if _, err := studio.CreateKey(ctx, api.CreateKey{Tenant: "acme", Admin: true}); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("the studio's key made an admin key: %v", err)
	}
	if _, err := studio.Keys(ctx); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("the studio's key listed the keys: %v", err)
	}
	// but it reloads the flows, as saving does
	if _, err := studio.ReloadFlows(ctx); err != nil {
		t.Errorf("the studio's key cannot reload the flows: %v", err)
	}
	// a tenant's ordinary key is told it cannot edit before it tries
	who, err := h.acme.StudioSession(ctx)
	if err != nil || who.Edits || who.Tenant != "acme" || who.Expires != nil {
		t.Errorf("an ordinary key's session: %v %+v", err, who)
	}
	if _, err := h.acme.ReloadFlows(ctx); !api.IsCode(err, api.CodeForbidden) {
		t.Errorf("an ordinary key reloaded the flows: %v", err)
	}
	// renewed, it lapses later
	renewed, err := studio.RenewStudioSession(ctx)
	if err != nil || renewed.Expires == nil || !renewed.Expires.After(*sess.Expires) {
		t.Fatalf("renewed: %v %+v (it expired at %v)", err, renewed, sess.Expires)
	}
	// a key past its expiry is refused
	k, err := h.srv.cat.KeyByHash(ctx, HashKey(sess.Key))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.cat.RenewKey(ctx, k.ID, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := studio.Thread(ctx, "mine"); !api.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("an expired studio key: %v", err)
	}
	if err := h.srv.cat.RenewKey(ctx, k.ID, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// an expired token is refused
	old, _ := h.srv.StudioToken("acme", -time.Second)
	if _, err := anon.StudioSignIn(ctx, old); !api.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("an expired token: %v", err)
	}
	if _, err := h.srv.StudioToken("no tenant!", time.Minute); err == nil {
		t.Fatal("a token for a tenant that cannot be")
	}
	if err := h.srv.RevokeStudioKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := studio.Thread(ctx, "mine"); !api.IsCode(err, api.CodeUnauthorized) {
		t.Fatalf("a studio key after the studio ended: %v", err)
	}
}

// The keys a studio's server handed out lapse with it: once it stops
// beating (stopped without revoking them, as a killed studio leaves
// them), a server sharing the store revokes them.
func TestStudioKeysLapseWithTheirServer(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			addr := storeAddr(t, backend)
			first := newHarness(t, addr, nil)
			token, err := first.srv.StudioToken("acme", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			anon := api.NewClient(first.base, "")
			anon.HTTP = first.http
			sess, err := anon.StudioSignIn(ctx, token)
			if err != nil {
				t.Fatal(err)
			}
			first.stop()
			second := newHarness(t, addr, nil, func(c *Config) { c.DeadAfter = time.Second })
			c := api.NewClient(second.base, sess.Key)
			c.HTTP = second.http
			deadline := time.Now().Add(60 * time.Second)
			for {
				k, err := second.srv.cat.KeyByHash(ctx, HashKey(sess.Key))
				if err != nil {
					t.Fatal(err)
				}
				if !k.Revoked.IsZero() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the key of a server that stopped beating is still active: %+v", k)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if _, err := c.Flows(ctx); !api.IsCode(err, api.CodeUnauthorized) {
				t.Errorf("the swept key: %v", err)
			}
			// the second server's own keys stand
			if _, err := second.acme.Flows(ctx); err != nil {
				t.Errorf("a key that does not lapse after the sweep: %v", err)
			}
		})
	}
}

// A flow's files are listed flow first, named from the project's root
// (the interview's prompts and schemas sit beside the flow directory),
// and checking them with an edit reports the edit's problems at their
// lines in the file edited, and draws the graph of what compiles.
func TestStudioFilesAndCheck(t *testing.T) {
	h := newHarness(t, "memory", nil)
	files, err := h.acme.FlowFiles(ctx, "interview")
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]api.FlowFile{}
	for _, f := range files.Files {
		byPath[f.Path] = f
	}
	main := files.Files[0]
	if main.Path != "flows/interview.yaml" || main.Role != "flow" || !strings.Contains(main.Text, "name: interview") {
		t.Fatalf("first file %s (%s)", main.Path, main.Role)
	}
	greeting, ok := byPath["prompts/interview/greeting.prompt"]
	if !ok || greeting.Role != "prompt" || byPath["schemas/interview.state.json"].Role != "schema" || byPath["flows/resume_review.yaml"].Role != "flow" {
		t.Fatalf("files: %v", keys(byPath))
	}
	// the root is named, not where it is on the server's disk
	abs, _ := filepath.Abs(flowsDir)
	if files.Root != filepath.Base(filepath.Dir(abs)) || strings.Contains(files.Root, "/") {
		t.Fatalf("the root %q, of %s", files.Root, filepath.Dir(abs))
	}

	// as it is: valid, with its graph
	chk, err := h.acme.CheckFlow(ctx, "interview", nil)
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Nodes []struct{ Name string } `json:"nodes"`
	}
	if !chk.Valid || json.Unmarshal(chk.Graph, &g) != nil || len(g.Nodes) != 24 {
		t.Fatalf("check as it is: valid %v, %d nodes, %v", chk.Valid, len(g.Nodes), chk.Diagnostics)
	}

	// a misspelt edge target, at its line, with the suggestion
	bad := strings.Replace(main.Text, "- {from: question, to: record_question}", "- {from: question, to: record_questio}", 1)
	if bad == main.Text {
		t.Fatal("the interview's edge from question is not where the test looks")
	}
	chk, err = h.acme.CheckFlow(ctx, "interview", []api.FileEdit{{Path: main.Path, Text: bad}})
	if err != nil {
		t.Fatal(err)
	}
	line := 1 + strings.Count(bad[:strings.Index(bad, "record_questio}")], "\n")
	if chk.Valid || chk.Graph != nil || len(chk.Diagnostics) == 0 {
		t.Fatalf("check with a misspelt target: %+v", chk)
	}
	d := chk.Diagnostics[0]
	if d.Code != "G001" || d.Pos.File != main.Path || d.Pos.Line != line || d.Suggestion != "record_question" {
		t.Fatalf("diagnostic %+v, want G001 at %s:%d", d, main.Path, line)
	}

	// an edited prompt is checked with the flow, and named as its file
	broken := greeting.Text + "\n{{.state.no_such_field}}\n"
	chk, err = h.acme.CheckFlow(ctx, "interview", []api.FileEdit{{Path: greeting.Path, Text: broken}})
	if err != nil {
		t.Fatal(err)
	}
	if chk.Valid || len(chk.Diagnostics) == 0 || chk.Diagnostics[0].Pos.File != greeting.Path {
		t.Fatalf("check with a broken prompt: %+v", chk.Diagnostics)
	}

	// nothing outside the directories the flows read is read
	outside := strings.Replace(main.Text, "schema: ../schemas/interview.state.json", "schema: ../go.mod", 1)
	chk, err = h.acme.CheckFlow(ctx, "interview", []api.FileEdit{{Path: main.Path, Text: outside}})
	if err != nil {
		t.Fatal(err)
	}
	if chk.Valid || chk.Diagnostics[0].Code != "D001" || !strings.Contains(chk.Diagnostics[0].Summary, "cannot read state schema") {
		t.Fatalf("a schema outside the flows' directories: %+v", chk.Diagnostics)
	}

	// only the flow's own files may be edited
	if _, err := h.acme.CheckFlow(ctx, "interview", []api.FileEdit{{Path: "go.mod", Text: "x"}}); !api.IsCode(err, api.CodeInvalidInput) {
		t.Fatalf("editing a file that is not the flow's: %v", err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// studioProject copies greet and approval into a directory of their own
// and serves it.
func studioProject(t *testing.T) (*harness, string) {
	dir := filepath.Join(t.TempDir(), "flows")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"greet.yaml", "approval.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(readFile(t, flowsDir+"/examples/"+name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarness(t, "memory", nil, func(c *Config) { c.FlowsDir = dir })
	return h, dir
}

// Saving writes the edited file and reloads the flows; a flow with
// errors, an edit begun from an older text, a tenant key and an edit that
// breaks another flow are refused, and each leaves the disk as it was.
func TestStudioSave(t *testing.T) {
	h, dir := studioProject(t)
	files, err := h.admin.FlowFiles(ctx, "greet")
	if err != nil {
		t.Fatal(err)
	}
	if !files.Writable || files.Files[0].Path != "greet.yaml" {
		t.Fatalf("files %+v", files)
	}
	f := files.Files[0]
	onDisk := func() string { return readFile(t, filepath.Join(dir, "greet.yaml")) }

	// errors: refused with the diagnostics, nothing written
	bad := strings.Replace(f.Text, "to: END", "to: ENDD", 1)
	_, err = h.admin.SaveFlow(ctx, "greet", []api.FileEdit{{Path: f.Path, Text: bad, Base: f.Hash}})
	var ae *api.Error
	if !api.IsCode(err, api.CodeInvalidFlow) || !strings.Contains(err.Error(), "nothing was saved") {
		t.Fatalf("saving a flow with errors: %v", err)
	}
	if raw, _ := json.Marshal(err.(*api.Error).Details); !strings.Contains(string(raw), `"code":"G001"`) {
		t.Fatalf("the refusal's details: %s", raw)
	}
	if onDisk() != f.Text {
		t.Fatal("a refused save wrote the file")
	}

	// a tenant key may check, not save
	good := strings.Replace(f.Text, "'Hello, '", "'Hi, '", 1)
	if _, err := h.acme.SaveFlow(ctx, "greet", []api.FileEdit{{Path: f.Path, Text: good, Base: f.Hash}}); !api.IsCode(err, api.CodeForbidden) {
		t.Fatalf("a tenant key saving: %v", err)
	}

	// saved and reloaded: a run says Hi
	saved, err := h.admin.SaveFlow(ctx, "greet", []api.FileEdit{{Path: f.Path, Text: good, Base: f.Hash}})
	if err != nil {
		t.Fatal(err)
	}
	if onDisk() != good || !saved.Reload || saved.Files[0].Text != good || saved.Files[0].Hash == f.Hash {
		t.Fatalf("after saving, the disk holds:\n%s", onDisk())
	}
	interviewless(t, h, "after")
	run, err := h.acme.RunWait(ctx, "after", api.StartRun{Input: map[string]any{"name": "Ada"}})
	if err != nil || run.State["greeting"] != "Hi, Ada!" {
		t.Fatalf("a run after the save: %v %v", err, run)
	}

	// an edit begun from the old text is refused
	_, err = h.admin.SaveFlow(ctx, "greet", []api.FileEdit{{Path: f.Path, Text: f.Text, Base: f.Hash}})
	if !errorAs(err, &ae) || ae.Code != api.CodeFileChanged || onDisk() != good {
		t.Fatalf("saving over a newer text: %v", err)
	}

	// a flow beside it that no longer loads: the save is undone
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte("version: 1\nname: broken\nnodes: {a: {kind: nope}}\nedges: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := strings.Replace(good, "'Hi, '", "'Hey, '", 1)
	_, err = h.admin.SaveFlow(ctx, "greet", []api.FileEdit{{Path: f.Path, Text: again, Base: saved.Files[0].Hash}})
	if !api.IsCode(err, api.CodeInvalidFlow) || !strings.Contains(err.Error(), "undone") || !strings.Contains(err.Error(), "broken.yaml") {
		t.Fatalf("a save the flows do not load with: %v", err)
	}
	if onDisk() != good {
		t.Fatalf("an undone save left:\n%s", onDisk())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Fatalf("files left in the flow directory: %v", entries)
	}
}

func errorAs(err error, target **api.Error) bool {
	e, ok := err.(*api.Error)
	if ok {
		*target = e
	}
	return ok
}

// A node's prompt renders over a thread's state, at a checkpoint or now,
// and over the flow's defaults without a thread; another tenant's thread
// is not found.
func TestStudioPromptPreview(t *testing.T) {
	h := newHarness(t, "memory", nil)
	if _, err := h.acme.CreateThread(ctx, api.CreateThread{ID: "ada", Flow: "interview", Values: values(t, flowsDir+"/examples/candidate.yaml")}); err != nil {
		t.Fatal(err)
	}
	p, err := h.acme.PreviewPrompt(ctx, "interview", "greeting", "ada", 0)
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, s := range p.Sections {
		text += s.Text
	}
	if p.Thread != "ada" || p.Checkpoint != 1 || !strings.Contains(p.Title, "interview/greeting") || !strings.Contains(text, "Ada") {
		t.Fatalf("preview %+v", p)
	}
	if p, err = h.acme.PreviewPrompt(ctx, "interview", "greeting", "ada", 1); err != nil || p.Checkpoint != 1 {
		t.Fatalf("at 1: %v %+v", err, p)
	}
	if _, err := h.acme.PreviewPrompt(ctx, "interview", "greeting", "ada", 9); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("at a checkpoint that is not: %v", err)
	}
	if _, err := h.globex.PreviewPrompt(ctx, "interview", "greeting", "ada", 0); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("another tenant's thread: %v", err)
	}
	if p, err = h.globex.PreviewPrompt(ctx, "interview", "greeting", "", 0); err != nil || p.Thread != "" || len(p.Sections) == 0 {
		t.Fatalf("over the defaults: %v %+v", err, p)
	}
	if _, err := h.acme.PreviewPrompt(ctx, "interview", "ingest_input", "", 0); !api.IsCode(err, api.CodeInvalidInput) {
		t.Fatalf("a node with no prompt: %v", err)
	}
	if _, err := h.acme.PreviewPrompt(ctx, "interview", "nope", "", 0); !api.IsCode(err, api.CodeNotFound) {
		t.Fatalf("no such node: %v", err)
	}
}

// The sign-in a browser makes from the file `trellis studio` writes: the
// token posted as a form, answered by the studio's page carrying the key
// (stored by no cache); the token is spent, and a spent one answers the
// page saying why, with 401 (or, to a client that takes no HTML, the
// JSON error). Anything but a form is refused with a JSON error, and the channel that says the token was tried is closed.
func TestStudioFormSignIn(t *testing.T) {
	h := newHarness(t, "memory", nil)
	token, err := h.srv.StudioToken("acme", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	spent := h.srv.StudioTokenSpent(token)
	post := func(ctype, body string, accept ...string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/studio/signin", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
		if len(accept) > 0 {
			req.Header.Set("Accept", accept[0])
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("application/json", `{"token": "`+token+`"}`)
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(body, `"unsupported_media_type"`) {
		t.Errorf("a JSON body: %d %s", resp.StatusCode, body)
	}
	select {
	case <-spent:
		t.Fatal("a refused request spent the token")
	default:
	}
	resp, body = post("application/x-www-form-urlencoded", url.Values{"token": {token}}.Encode())
	m := regexp.MustCompile(`<meta name=key content="(trk_[^"]+)">`).FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the form sign-in: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	select {
	case <-spent:
	default:
		t.Error("the token is not told spent once exchanged")
	}
	studio := api.NewClient(h.base, m[1])
	studio.HTTP = h.http
	sess, err := studio.StudioSession(ctx)
	if err != nil || sess.Tenant != "acme" || sess.Scope != "studio" || !sess.Edits || sess.Expires == nil {
		t.Fatalf("the form's key: %v %+v", err, sess)
	}
	resp, body = post("application/x-www-form-urlencoded", url.Values{"token": {token}}.Encode())
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "used already or has expired") {
		t.Errorf("the token posted again: %d %s", resp.StatusCode, body)
	}
	// a client that takes no HTML is answered the error as JSON
	resp, body = post("application/x-www-form-urlencoded", url.Values{"token": {token}}.Encode(), "application/json")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"unauthorized"`) {
		t.Errorf("the token posted again, taking JSON: %d %s", resp.StatusCode, body)
	}
	select {
	case <-h.srv.StudioTokenSpent("trs_never"):
	default:
		t.Error("a token never issued is not told spent")
	}
}
