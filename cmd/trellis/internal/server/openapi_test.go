package server

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
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
		doc, err := libopenapi.NewDocument(schemas.OpenAPI)
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
