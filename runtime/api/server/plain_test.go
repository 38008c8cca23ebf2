package server

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// leaks are what a tenant's error never shows: Go's types and the
// standard library's internals, programs the server runs, and the
// machine's directories.
var leaks = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\bgo (struct|value|type)\b|\bof type\b|\binto go\b`),
	regexp.MustCompile(`\b(u?int(8|16|32|64)?|float(32|64)|complex(64|128)|uintptr)\b`),
	regexp.MustCompile(`interface ?\{|map\[|\[\][a-z*]|\bstruct ?\{|\bfunc\(`),
	regexp.MustCompile(`\b(json|strconv|reflect|yaml|os|io|fs|syscall|exec|net|url|http|utf8|big|errors|runtime)[.:] ?[A-Za-z]`),
	regexp.MustCompile(`\b[a-z][a-z0-9]*\.[A-Z][A-Za-z0-9]*\b`), // a package's type, api.StartRun
	regexp.MustCompile(`\b(goroutine|panic|nil pointer|runtime error|unexpected EOF|EOF)\b`),
	regexp.MustCompile(`\b(sox|ffmpeg|pocketsphinx\w*|flite|espeak(-ng)?|bwrap|runsc|python3?|dockerd?)\b`),
	regexp.MustCompile(`(^|[\s"'(=:,])/(tmp|usr|home|root|work|var|etc|proc|opt|srv|bin|dev|sys|run)(/|\b)`),
	regexp.MustCompile(`\.go:\d+`),
}

// leakIn reports what of a tenant's error text leaks, given the request
// (whatever the request itself holds may be quoted back) and the
// server's directories.
func leakIn(text, request string, dirs []string) string {
	for _, d := range dirs {
		if d != "" && strings.Contains(text, d) && !strings.Contains(request, d) {
			return d
		}
	}
	for _, re := range leaks {
		for _, m := range re.FindAllString(text, -1) {
			if !strings.Contains(request, strings.TrimSpace(strings.Trim(m, `"'(=:,`))) {
				return m
			}
		}
	}
	return ""
}

// serverDirs are the directories of the machine a tenant never learns.
func serverDirs(t *testing.T) []string {
	flows, _ := filepath.Abs(flowsDir)
	wd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	out := []string{flows, wd, filepath.Dir(wd), os.TempDir() + "/", runtime.GOROOT(), t.TempDir()}
	if home != "" && home != "/" {
		out = append(out, home)
	}
	return out
}

// hostileValues are a JSON body field's values that no route takes as
// they are: integers past 64 bits, numbers past a float's range, other
// types, text that is not UTF-8, and nesting past the decoder's depth.
var hostileValues = []string{
	`9223372036854775808`, `-9223372036854775809`, `18446744073709551616`, `1e400`, `-1e400`, `1e-400`, `1.5`, `-0`,
	`"x"`, `{}`, `[]`, `true`, `null`, "\"\xff\xfe\"", `"\ud800"`, `{"a": 1e400}`, `{"a": 9223372036854775808}`, `[1e400]`,
	`{"a": {"b": [1e400]}}`, `{"a": "\u0000"}`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200), `"` + strings.Repeat("é", 20000) + `"`,
}

// hostileBodies are whole bodies no route takes.
var hostileBodies = []string{
	`1e400`, `9223372036854775808`, `[]`, `"x"`, `null`, "\xff\xfe", "{\"\xff\": 1}", `{"x": 1}`, `{"x": 1, "x": 2}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001), `{`, `{"a" 1}`, `{"a": 1,}`, `{} {}`, `{"a": 01}`, `{"a": .5}`, `{"a": NaN}`,
}

// TestErrorsSpeakPlainly sends every operation of the document hostile
// input (in each field of its JSON body, as whole bodies, and in its
// query parameters) and reads every 4xx answer: each has the error shape
// with a code, and its message and details are plain words that show no
// Go type, no internals of the standard library's parsers, no program
// the server runs and none of its directories.
func TestErrorsSpeakPlainly(t *testing.T) {
	h := newHarness(t, "memory", nil, func(c *Config) { c.Speech, c.Page = smallSpeech{}, smallPage("voice") })
	dirs := serverDirs(t)
	access := map[string]access{}
	for _, rt := range h.srv.routes() {
		access[rt.method+" "+rt.path] = rt.access
	}
	interviewless(t, h, "p1")
	run, err := h.acme.RunWait(ctx, "p1", api.StartRun{Input: map[string]any{"name": "Ada"}})
	if err != nil {
		t.Fatal(err)
	}
	greet := readFile(t, flowsDir+"/examples/greet.yaml")
	checked := 0
	send := func(op docOp, key, query, body, ctype string) {
		t.Helper()
		path := op.path
		for k, v := range map[string]string{"id": "p1", "run": run.ID, "key": "nokey", "name": "greet", "node": "greet", "version": "v", "schedule": "nosched"} {
			path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
		}
		req, err := http.NewRequest(op.method, h.base+path+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", ctype)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			return
		}
		checked++
		what := fmt.Sprintf("%s %s%s (%.60q)", op.method, path, query, body)
		var eb api.ErrorBody
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Errorf("%s: %d without the error shape: %.200s", what, resp.StatusCode, raw)
			return
		}
		details, _ := json.Marshal(eb.Error.Details)
		if leak := leakIn(eb.Error.Message+" "+string(details), query+" "+body, dirs); leak != "" {
			t.Errorf("%s: %d %s shows %q: %s %s", what, resp.StatusCode, eb.Error.Code, leak, eb.Error.Message, details)
		}
	}
	for _, op := range docOps(t) {
		key := h.acme.Key
		switch access[op.pattern()] {
		case admin:
			key = h.admin.Key
		case public:
			key = ""
		case agent:
			key = grantFor(t, h, h.acme, "p1")
		}
		base := authCases[op.pattern()].body
		switch {
		case base == "FLOW":
			base = greet
		case base == "" && op.body == "application/json":
			base = "{}"
		}
		base = strings.ReplaceAll(base, "{version}", "v")
		switch op.body {
		case "application/json":
			var doc map[string]json.RawMessage
			if err := json.Unmarshal([]byte(base), &doc); err != nil {
				t.Fatalf("%s: %v", op.pattern(), err)
			}
			for name := range op.bodyProps {
				for _, v := range hostileValues {
					m := maps.Clone(doc)
					m[name] = json.RawMessage("0")
					b, _ := json.Marshal(m)
					send(op, key, "", strings.Replace(string(b), `"`+name+`":0`, `"`+name+`":`+v, 1), "application/json")
				}
			}
			for _, b := range hostileBodies {
				send(op, key, "", b, "application/json")
			}
		case "application/yaml":
			for _, b := range []string{"version: 1\nname: x\nstate: {schema: {type: object, properties: {n: {type: integer, default: 1e400}}}}\n",
				"version: 1e400\n", "\xff\xfe", "a: [" + strings.Repeat("[", 5000), "version: 1\nname: x\nnodes: !!binary x\n", "a: &a [*a, *a]\n"} {
				send(op, key, "", b, "application/yaml")
			}
		}
		for _, p := range op.params {
			if p.in != "query" || p.style == "deepObject" {
				continue
			}
			for _, v := range []string{"9223372036854775808", "-9223372036854775809", "1e400", "1.5", "\xff", "x", "", "[]"} {
				send(op, key, "?"+url.Values{p.name: {v}}.Encode(), authCases[op.pattern()].body, "application/json")
			}
		}
	}
	if checked < 500 {
		t.Fatalf("only %d answers were errors: the hostile input does not reach the routes", checked)
	}
	t.Logf("%d errors read", checked)
}

// The leak patterns find what they are for, and not plain words.
func TestLeakPatterns(t *testing.T) {
	for _, bad := range []string{
		`json: cannot unmarshal number 9223372036854775808 into Go struct field StartRun.limit of type int64`,
		`strconv.ParseFloat: parsing "1e400": value out of range`,
		`convert audio: exec: "sox": executable file not found`,
		`reading /tmp/trellis-123/a.wav`,
		`flows: /srv/trellis/flows`,
		`unexpected EOF`,
	} {
		if leakIn(bad, "", nil) == "" {
			t.Errorf("%q passes", bad)
		}
	}
	for _, ok := range []string{
		`the body is not valid JSON: field "limit" is a number out of range (an integer from -9223372036854775808 to 9223372036854775807)`,
		`no route GET /v1/threads/x`,
		`flow "greet" has no node "x"; did you mean "greet"?`,
		`identity is 1 to 64 letters, digits, '.', '_' or '-'`,
	} {
		if leak := leakIn(ok, "", nil); leak != "" {
			t.Errorf("%q: %q", ok, leak)
		}
	}
}
