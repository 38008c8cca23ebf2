package server

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/schemas"
)

// docOp is one operation of schemas/openapi.yaml, as the tests read it.
type docOp struct {
	method, path, id string
	params           []docParam
	statuses         map[int]bool
	// body is the media type of its request body ("" for none); bodyProps
	// are the JSON body's top-level properties' schemas.
	body      string
	bodyProps map[string]map[string]any
	public    bool
}

// docParam is a parameter of an operation.
type docParam struct {
	name, in, typ, style string
	required             bool
	min, max             *big.Int
	enum                 []string
}

func (o docOp) pattern() string { return o.method + " " + o.path }

// docOps reads the operations of schemas/openapi.yaml.
func docOps(t testing.TB) []docOp {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	resolve := func(v any) map[string]any {
		m, _ := v.(map[string]any)
		for {
			ref, ok := m["$ref"].(string)
			if !ok {
				return m
			}
			var cur any = doc
			for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
				cur = cur.(map[string]any)[part]
			}
			m = cur.(map[string]any)
		}
	}
	params := func(list any) []docParam {
		var out []docParam
		items, _ := list.([]any)
		for _, it := range items {
			p := resolve(it)
			sch := resolve(p["schema"])
			dp := docParam{name: p["name"].(string), in: p["in"].(string), required: p["required"] == true}
			dp.typ, _ = sch["type"].(string)
			dp.style, _ = p["style"].(string)
			if v, ok := sch["minimum"]; ok {
				dp.min, _ = new(big.Int).SetString(fmt.Sprint(v), 10)
			}
			if v, ok := sch["maximum"]; ok {
				dp.max, _ = new(big.Int).SetString(fmt.Sprint(v), 10)
			}
			for _, e := range asList(sch["enum"]) {
				dp.enum = append(dp.enum, fmt.Sprint(e))
			}
			out = append(out, dp)
		}
		return out
	}
	var ops []docOp
	for path, item := range doc["paths"].(map[string]any) {
		pi := item.(map[string]any)
		shared := params(pi["parameters"])
		for method, v := range pi {
			if method == "parameters" {
				continue
			}
			op := v.(map[string]any)
			o := docOp{method: strings.ToUpper(method), path: path, statuses: map[int]bool{}}
			o.id, _ = op["operationId"].(string)
			o.params = append(slices.Clone(shared), params(op["parameters"])...)
			for code := range op["responses"].(map[string]any) {
				n, err := strconv.Atoi(code)
				if err != nil {
					t.Fatalf("%s %s: response %q is not a status", o.method, path, code)
				}
				o.statuses[n] = true
			}
			if sec, ok := op["security"].([]any); ok && len(sec) == 0 {
				o.public = true
			}
			if rb := resolve(op["requestBody"]); rb != nil {
				for mt, c := range rb["content"].(map[string]any) {
					o.body = mt
					sch := resolve(c.(map[string]any)["schema"])
					props, _ := sch["properties"].(map[string]any)
					o.bodyProps = map[string]map[string]any{}
					for k, p := range props {
						o.bodyProps[k] = resolve(p)
					}
				}
			}
			ops = append(ops, o)
		}
	}
	slices.SortFunc(ops, func(a, b docOp) int { return strings.Compare(a.pattern(), b.pattern()) })
	return ops
}

func asList(v any) []any { l, _ := v.([]any); return l }

var (
	bigOne = big.NewInt(1)
	two63  = new(big.Int).Lsh(bigOne, 63)
	two64  = new(big.Int).Lsh(bigOne, 64)
)

// integerValues are the boundary values of an integer parameter: around
// its documented range, at the ends of the integer sizes servers and
// stores use, text that is not an integer, and random integers of every
// magnitude.
func integerValues(p docParam, rng *rand.Rand) []string {
	lo, hi := p.min, p.max
	if lo == nil {
		lo = new(big.Int).Neg(two63)
	}
	if hi == nil {
		hi = new(big.Int).Sub(two63, bigOne)
	}
	var out []string
	for _, n := range []*big.Int{lo, hi, big.NewInt(0), big.NewInt(-1), big.NewInt(1 << 31), big.NewInt(1<<53 + 1),
		new(big.Int).Sub(two63, bigOne), two63, new(big.Int).Sub(two64, bigOne), two64, new(big.Int).Exp(big.NewInt(10), big.NewInt(40), nil)} {
		out = append(out, n.String(), new(big.Int).Sub(n, bigOne).String(), new(big.Int).Add(n, bigOne).String())
	}
	for range 6 {
		n := new(big.Int).Lsh(big.NewInt(int64(rng.Uint64()>>1)), uint(rng.IntN(20)))
		n.Rsh(n, uint(rng.IntN(64)))
		if rng.IntN(2) == 0 {
			n.Neg(n)
		}
		out = append(out, n.String())
	}
	return append(out, "1.5", "1e3", "0x10", "abc", " 1", "1 ", "--1", "٣", "9"+strings.Repeat("0", 400))
}

// inRange reports whether v is an integer of p's documented range.
func inRange(p docParam, v string) bool {
	if strings.TrimSpace(v) != v {
		return false
	}
	n, ok := new(big.Int).SetString(v, 10)
	if !ok {
		return false
	}
	return (p.min == nil || n.Cmp(p.min) >= 0) && (p.max == nil || n.Cmp(p.max) <= 0)
}

// stringValues are boundary values of a string parameter.
func stringValues(p docParam, rng *rand.Rand) []string {
	out := []string{"x", strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("z", 5000), "é", "a b", "a/b", "%", "'", "<>", "\x00", "a:b|c", "-1",
		"18446744073709551616"}
	if p.in != "path" {
		out = append(out, ".", "..", "../../etc/passwd")
	}
	for _, e := range p.enum {
		out = append(out, e, strings.ToUpper(e))
	}
	b := make([]byte, 1+rng.IntN(40))
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return append(out, string(b))
}

// grantKey stands for a voice agent's grant for the thread a request
// names.
const grantKey = "GRANT"

// routeFixture is what one request of the property test names: a
// thread of its caller's with one run, and a key to revoke.
type routeFixture struct {
	thread, run, key string
}

// TestEveryRouteTakesBoundaryValues drives every operation of the
// document with boundary values in each of its parameters (path, query
// and header) and in its JSON body's integer fields, and with the ways a
// request goes wrong (no key, another tenant's admin route, a body too
// large, of another type, not JSON): no answer is a 500 (nor another 5xx
// but a missing LiveKit server's or speech engine's), every status is
// one the document gives the operation, every body matches it, and an
// integer or enum parameter outside its documented range is a 400 that
// names it (one inside is not a 400).
func TestEveryRouteTakesBoundaryValues(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TRELLIS_BOUNDARY_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TRELLIS_BOUNDARY_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (TRELLIS_BOUNDARY_SEED=%d runs it again)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	const maxBody = 64 << 10
	h := newHarness(t, "sqlite", nil, func(c *Config) { c.Speech, c.Page, c.MaxBody = smallSpeech{}, smallPage("voice"), maxBody })
	access := map[string]access{}
	for _, rt := range h.srv.routes() {
		access[rt.method+" "+rt.path] = rt.access
	}
	// a flow and a node that sends a prompt, for the prompt's route
	promptFlow, promptNode := "", ""
	for _, l := range h.srv.flows.list() {
		for _, n := range l.flow.Graph().Nodes {
			if _, ok := n.Impl.(kind.Previewer); ok && promptFlow == "" {
				promptFlow, promptNode = l.flow.Name(), n.Name
			}
		}
	}
	greet := readFile(t, flowsDir+"/examples/greet.yaml")
	n := 0
	fixture := func() routeFixture {
		n++
		f := routeFixture{thread: "b" + strconv.Itoa(n)}
		interviewless(t, h, f.thread)
		run, err := h.acme.RunWait(ctx, f.thread, api.StartRun{Input: map[string]any{"name": "Ada"}})
		if err != nil {
			t.Fatal(err)
		}
		f.run = run.ID
		k, _, err := CreateKey(ctx, h.srv.cat, "acme", "victim", false)
		if err != nil {
			t.Fatal(err)
		}
		f.key = k.ID
		return f
	}
	shared := fixture()
	requests := 0
	// send sends one request of op: path values by name (the fixture's
	// unless set), query and header values, the body and its type, and
	// the key ("" none).
	send := func(op docOp, pathValues, query, header map[string]string, body, ctype, key string) (int, *api.Error) {
		t.Helper()
		requests++
		f := shared
		if op.method == "DELETE" || op.method == "PUT" {
			f = fixture() // it deletes or changes what it names
		}
		if key == grantKey {
			key = grantFor(t, h, h.acme, f.thread)
		}
		vals := map[string]string{"id": f.thread, "run": f.run, "key": f.key, "name": "greet", "node": "greet"}
		if strings.Contains(op.path, "{node}") {
			vals["name"], vals["node"] = promptFlow, promptNode
		}
		maps.Copy(vals, pathValues)
		path := op.path
		for k, v := range vals {
			path = strings.ReplaceAll(path, "{"+k+"}", url.PathEscape(v))
		}
		q := url.Values{}
		for k, v := range query {
			q.Set(k, v)
		}
		u := h.base + path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		req, err := http.NewRequest(op.method, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", ctype)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		req.Header.Set("Accept", "application/json, text/event-stream, */*")
		resp, err := h.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var eb api.ErrorBody
		if resp.StatusCode >= 400 {
			if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == nil {
				t.Errorf("%s %s: %d without the error shape: %.200s", op.method, u, resp.StatusCode, raw)
				return resp.StatusCode, &api.Error{}
			}
		}
		what := fmt.Sprintf("%s %.300s (%q)", op.method, u, body[:min(len(body), 60)])
		switch {
		case resp.StatusCode == 500 || resp.StatusCode > 503:
			t.Errorf("%s: %d %.300s", what, resp.StatusCode, raw)
		case resp.StatusCode >= 500 && !slices.Contains([]api.Code{api.CodeVoiceNotConfigured, api.CodeSpeechUnavailable, api.CodeLiveKitFailed}, eb.Error.Code):
			t.Errorf("%s: %d %.300s", what, resp.StatusCode, raw)
		}
		if !op.statuses[resp.StatusCode] {
			t.Errorf("%s: %d, which the document does not give %s (%.200s)", what, resp.StatusCode, op.pattern(), raw)
		}
		return resp.StatusCode, eb.Error
	}
	for _, op := range docOps(t) {
		acc, ok := access[op.pattern()]
		if !ok {
			t.Errorf("%s is in the document, not in the server", op.pattern())
			continue
		}
		key := h.acme.Key
		if acc == admin || acc == edit {
			key = h.admin.Key
		}
		switch acc {
		case public:
			key = ""
		case agent:
			key = grantKey // a voice agent's grant for the thread it names
		}
		body, ctype := authCases[op.pattern()].body, authCases[op.pattern()].ctype
		if body == "FLOW" {
			body = greet
		}
		if ctype == "" && body != "" {
			ctype = "application/json"
		}
		base, _ := send(op, nil, nil, nil, body, ctype, key)

		for _, p := range op.params {
			if p.style == "deepObject" || p.in == "header" && p.name == "Authorization" {
				continue
			}
			var values []string
			switch {
			case p.typ == "integer":
				values = integerValues(p, rng)
			case p.typ == "boolean":
				values = []string{"true", "false", "1", "yes", "TRUE", "maybe"}
			default:
				values = stringValues(p, rng)
			}
			for _, v := range values {
				var pv, qv, hv map[string]string
				switch p.in {
				case "path":
					pv = map[string]string{p.name: v}
				case "query":
					qv = map[string]string{p.name: v}
				case "header":
					if strings.IndexFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 || strings.TrimSpace(v) != v {
						continue // not a header's value, or one with white space around it, which is not part of it
					}
					hv = map[string]string{p.name: v}
				}
				code, e := send(op, pv, qv, hv, body, ctype, key)
				if p.in == "path" || base == 400 {
					continue
				}
				// a string's value is checked further by what it names (a
				// thread, a cursor, a namespace): only a 400 naming it
				ranged, valid := true, true
				switch {
				case p.typ == "integer":
					valid = inRange(p, v)
				case p.typ == "boolean":
					valid = v == "true" || v == "false"
				case len(p.enum) > 0:
					valid = slices.Contains(p.enum, v)
				default:
					ranged, valid = false, code != 400
				}
				switch {
				case ranged && valid && code == 400:
					t.Errorf("%s with %s %s=%q (in its range): 400 %s", op.pattern(), p.in, p.name, v, e.Message)
				case !valid && code != 400:
					t.Errorf("%s with %s %s=%q (out of its range): %d, want 400", op.pattern(), p.in, p.name, v, code)
				case !valid && (!strings.Contains(e.Message, p.name) || parameterOf(e) != p.name):
					t.Errorf("%s with %s %s=%q: the 400 does not name the parameter: %s %v", op.pattern(), p.in, p.name, v, e.Message, e.Details)
				}
			}
		}

		// the JSON body's integer fields
		if op.body == "application/json" && body != "" {
			var doc map[string]any
			if json.Unmarshal([]byte(body), &doc) == nil {
				for name, sch := range op.bodyProps {
					if sch["type"] != "integer" {
						continue
					}
					p := docParam{name: name, typ: "integer"}
					if v, ok := sch["minimum"]; ok {
						p.min, _ = new(big.Int).SetString(fmt.Sprint(v), 10)
					}
					if v, ok := sch["maximum"]; ok {
						p.max, _ = new(big.Int).SetString(fmt.Sprint(v), 10)
					}
					for _, v := range integerValues(p, rng) {
						if _, ok := new(big.Int).SetString(v, 10); !ok {
							continue // not JSON: the bad-JSON case below
						}
						raw, _ := json.Marshal(doc)
						withV := strings.Replace(string(raw), "{", `{"`+name+`": `+v+`, `, 1)
						if _, had := doc[name]; had {
							m := maps.Clone(doc)
							delete(m, name)
							raw, _ = json.Marshal(m)
							withV = strings.Replace(string(raw), "{", `{"`+name+`": `+v+`, `, 1)
							withV = strings.Replace(withV, ", }", "}", 1)
						}
						code, e := send(op, nil, nil, nil, withV, ctype, key)
						if !inRange(p, v) && (code < 400 || !strings.Contains(e.Message, name)) {
							t.Errorf("%s with %s %s (out of its range): %d %v", op.pattern(), name, v, code, e)
						}
					}
				}
			}
		}

		// the ways a request goes wrong
		if strings.HasPrefix(op.path, "/v1/") {
			if code, e := send(op, nil, map[string]string{"unknown_x": "1"}, nil, body, ctype, key); code != 400 || parameterOf(e) != "unknown_x" {
				t.Errorf("%s with a parameter it does not take: %d %v", op.pattern(), code, e)
			}
		}
		if !op.public {
			if code, _ := send(op, nil, nil, nil, body, ctype, ""); code != 401 {
				t.Errorf("%s with no key: %d", op.pattern(), code)
			}
		}
		if acc == admin || acc == edit {
			if code, _ := send(op, nil, nil, nil, body, ctype, h.acme.Key); code != 403 {
				t.Errorf("%s with a tenant's key: %d", op.pattern(), code)
			}
		}
		if op.body != "" && acc != agent {
			large, ltype := strings.Repeat(" ", maxBody+1), op.body
			if op.body == "multipart/form-data" {
				var b strings.Builder
				mw := multipart.NewWriter(&b)
				fw, _ := mw.CreateFormFile("file", "a.wav")
				fw.Write([]byte(large))
				mw.Close()
				large, ltype = b.String(), mw.FormDataContentType()
			}
			if code, _ := send(op, nil, nil, nil, large, ltype, key); code != 413 {
				t.Errorf("%s with a body too large: %d", op.pattern(), code)
			}
			if code, _ := send(op, nil, nil, nil, "<x/>", "application/xml", key); code != 415 && op.body != "application/yaml" {
				t.Errorf("%s with an XML body: %d", op.pattern(), code)
			}
			if op.body == "application/json" {
				if code, _ := send(op, nil, nil, nil, `{"x": `, ctype, key); code != 400 {
					t.Errorf("%s with a body cut short: %d", op.pattern(), code)
				}
			}
		}
	}
	t.Logf("%d requests", requests)
}

// parameterOf is the parameter an error's details name.
func parameterOf(e *api.Error) string {
	switch d := e.Details.(type) {
	case map[string]any:
		s, _ := d["parameter"].(string)
		return s
	}
	return ""
}
