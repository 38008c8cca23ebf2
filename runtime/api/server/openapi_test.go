package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi/datamodel"
	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/schemas"
)

// TestOpenAPIDescribesEveryRoute fails when a route is registered but not
// described in schemas/openapi.yaml, or described but not registered.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			if method != "parameters" {
				described[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	registered := map[string]bool{}
	for _, rt := range (&Server{}).routes() {
		registered[rt.method+" "+rt.path] = true
	}
	for _, r := range slices.Sorted(maps.Keys(registered)) {
		if !described[r] {
			t.Errorf("route %s is not in schemas/openapi.yaml", r)
		}
	}
	for _, d := range slices.Sorted(maps.Keys(described)) {
		if !registered[d] {
			t.Errorf("schemas/openapi.yaml describes %s, which the server does not have", d)
		}
	}
}

var (
	specOnce sync.Once
	spec     validator.Validator
	specErr  error
)

// openAPI is a validator of schemas/openapi.yaml, itself validated.
func openAPI(t *testing.T) validator.Validator {
	t.Helper()
	specOnce.Do(func() {
		// a graph holds its subflows' graphs: a recursion through the
		// arrays of its nodes, which ends where a node runs no subflow
		doc, err := libopenapi.NewDocumentWithConfiguration(schemas.OpenAPI, &datamodel.DocumentConfiguration{IgnoreArrayCircularReferences: true})
		if err != nil {
			specErr = err
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			specErr = fmt.Errorf("%v", errs)
			return
		}
		if ok, verrs := v.ValidateDocument(); !ok {
			var msgs []string
			for _, e := range verrs {
				msgs = append(msgs, e.Message+": "+e.Reason)
			}
			specErr = fmt.Errorf("schemas/openapi.yaml is not a valid OpenAPI document: %s", strings.Join(msgs, "; "))
			return
		}
		spec = v
	})
	if specErr != nil {
		t.Fatal(specErr)
	}
	return spec
}

func TestOpenAPIDocumentIsValid(t *testing.T) { openAPI(t) }

// checked is an http.RoundTripper that checks every response against the
// OpenAPI document: its status is documented for the route, and its body
// matches the documented schema. A stream's events are checked by the
// tests that read them.
type checked struct {
	t    *testing.T
	v    validator.Validator
	mu   sync.Mutex
	errs []string
}

func (c *checked) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	check := *resp
	check.Body = io.NopCloser(bytes.NewReader(body))
	if ok, verrs := c.v.ValidateHttpResponse(req, &check); !ok {
		c.mu.Lock()
		for _, e := range verrs {
			if e.ValidationType == "path" && (resp.StatusCode == 404 || resp.StatusCode == 405) {
				continue // a request for no route: the tests check its error shape
			}
			c.errs = append(c.errs, fmt.Sprintf("%s %s → %d: %s (%s)", req.Method, req.URL.Path, resp.StatusCode, e.Message, e.Reason))
		}
		c.mu.Unlock()
	}
	return resp, nil
}

// checkedClient returns an HTTP client whose responses are checked against
// the document when the test ends.
func checkedClient(t *testing.T) *http.Client {
	c := &checked{t: t, v: openAPI(t)}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, e := range c.errs {
			t.Errorf("response does not match schemas/openapi.yaml: %s", e)
		}
	})
	return &http.Client{Transport: c}
}

// Every operation of the document has an operationId, unique, so that a
// generated client names its methods.
func TestOpenAPIOperationIDs(t *testing.T) {
	seen := map[string]string{}
	for _, op := range docOps(t) {
		switch prev, dup := seen[op.id]; {
		case op.id == "":
			t.Errorf("%s has no operationId", op.pattern())
		case dup:
			t.Errorf("%s and %s are both operationId %s", prev, op.pattern(), op.id)
		}
		seen[op.id] = op.pattern()
	}
}

// The document passes Redocly's recommended rules with no error and no
// warning but those schemas/.redocly.lint-ignore.yaml justifies (as make
// openapi-lint checks it).
func TestOpenAPILint(t *testing.T) {
	redocly, _ := filepath.Abs("../../../.ci/openapi/node_modules/.bin/redocly")
	if _, err := os.Stat(redocly); err != nil {
		if _, err := exec.LookPath("npm"); err == nil {
			t.Fatal("Redocly is not installed: `make deps` installs it with npm into .ci/openapi")
		}
		t.Skip("Redocly is not installed, nor npm to install it with (`make deps` does with npm)")
	}
	cmd := exec.Command(redocly, "lint", "--config", "schemas/redocly.yaml", "--format=json", "schemas/openapi.yaml")
	cmd.Dir = "../../.."
	out, err := cmd.Output()
	var report struct {
		Totals struct {
			Errors, Warnings, Ignored int
		} `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if jerr := json.Unmarshal(out, &report); jerr != nil {
		t.Fatalf("redocly lint: %v (%v): %s", jerr, err, out)
	}
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	if report.Totals.Errors+report.Totals.Warnings != 0 {
		t.Errorf("redocly lint: %d errors, %d warnings", report.Totals.Errors, report.Totals.Warnings)
	}
}

// The served document names the server it is served from: the address
// the client reached, the prefix the handler is mounted under, and what
// a proxy in front forwards (scheme, host, prefix); a forwarded value
// that is no host or path is not taken.
func TestServedDocumentNamesItsServer(t *testing.T) {
	s := serve(t, openRuntime(t, "memory"), stepFlows(t, 1), "")
	mux := http.NewServeMux()
	mux.Handle("/trellis/", http.StripPrefix("/trellis", s.srv.Handler()))
	mounted := httptest.NewServer(mux)
	defer mounted.Close()
	served := func(base, path string, header map[string]string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var doc struct {
			Servers []struct {
				URL string `yaml:"url"`
			} `yaml:"servers"`
			Paths map[string]any `yaml:"paths"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil || resp.StatusCode != 200 || len(doc.Servers) != 1 || len(doc.Paths) == 0 {
			t.Fatalf("%s: %d %v %+v", path, resp.StatusCode, err, doc.Servers)
		}
		return doc.Servers[0].URL
	}
	host := strings.TrimPrefix(mounted.URL, "http://")
	for _, c := range []struct {
		base, path string
		header     map[string]string
		want       string
	}{
		{s.base, "/openapi.yaml", nil, s.base},
		{mounted.URL, "/trellis/openapi.yaml", nil, mounted.URL + "/trellis"},
		{mounted.URL, "/trellis/openapi.yaml", map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "api.example.com", "X-Forwarded-Prefix": "/edge"},
			"https://api.example.com/edge/trellis"},
		{mounted.URL, "/trellis/openapi.yaml", map[string]string{"X-Forwarded-Proto": "gopher", "X-Forwarded-Host": "evil.example.com\" - url: x",
			"X-Forwarded-Prefix": "/a b"}, "http://" + host + "/trellis"},
	} {
		if got := served(c.base, c.path, c.header); got != c.want {
			t.Errorf("%s%s with %v: servers[0].url %q, want %q", c.base, c.path, c.header, got, c.want)
		}
	}
}
