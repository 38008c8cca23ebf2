package server

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/schemas"
)

// The query parameters of the API's routes are those schemas/openapi.yaml
// declares, in the styles it declares (form, and deepObject for an
// object: name[KEY]=VALUE): a parameter a route does not take is refused
// (400, naming it), as an unknown field of a body is, so that a filter a
// client believes it applies is never ignored.

// repeated is the style of a list parameter given once per item.
const repeated = "form, exploded"

// queryStyles are the query parameters of each route (method and path),
// by name, with their styles.
var queryStyles = sync.OnceValue(func() map[string]map[string]string {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(schemas.OpenAPI, &doc); err != nil {
		panic("schemas/openapi.yaml: " + err.Error())
	}
	type param struct {
		Ref     string `yaml:"$ref"`
		Name    string `yaml:"name"`
		In      string `yaml:"in"`
		Style   string `yaml:"style"`
		Explode *bool  `yaml:"explode"`
		Schema  struct {
			Type string `yaml:"type"`
		} `yaml:"schema"`
	}
	var components struct {
		Components struct {
			Parameters map[string]param `yaml:"parameters"`
		} `yaml:"components"`
	}
	_ = yaml.Unmarshal(schemas.OpenAPI, &components)
	collect := func(n yaml.Node, into map[string]string) {
		var op struct {
			Parameters []param `yaml:"parameters"`
		}
		if n.Kind == yaml.SequenceNode {
			_ = n.Decode(&op.Parameters)
		} else {
			_ = n.Decode(&op)
		}
		for _, p := range op.Parameters {
			if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
				p = components.Components.Parameters[name]
			}
			if p.In == "query" {
				if p.Style == "" {
					p.Style = "form"
				}
				if p.Style == "form" && p.Schema.Type == "array" && (p.Explode == nil || *p.Explode) {
					// a list, one parameter per item (form explodes by default)
					p.Style = repeated
				}
				into[p.Name] = p.Style
			}
		}
	}
	out := map[string]map[string]string{}
	for path, item := range doc.Paths {
		shared := map[string]string{}
		if n, ok := item["parameters"]; ok {
			collect(n, shared)
		}
		for method, n := range item {
			if method == "parameters" {
				continue
			}
			params := maps.Clone(shared)
			collect(n, params)
			out[strings.ToUpper(method)+" "+path] = params
		}
	}
	return out
})

// checkQuery refuses a query a route does not take: a malformed one, a
// parameter it does not declare or one given twice, or a deepObject
// parameter not written name[KEY]=VALUE.
func checkQuery(rt route, r *http.Request) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return &api.Error{Code: api.CodeBadRequest, Message: "the query is malformed: " + err.Error()}
	}
	styles := queryStyles()[rt.method+" "+rt.path]
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if base, _, deep := strings.Cut(name, "["); deep && styles[base] == "deepObject" {
			if _, ok := deepKey(name, base); !ok {
				return badParam(base, "is an object, given as %s[KEY]=VALUE", base)
			}
			if len(q[name]) > 1 {
				return badParam(name, "is given more than once")
			}
			continue
		}
		style, ok := styles[name]
		switch {
		case !ok:
			takes := "none"
			if len(styles) > 0 {
				takes = strings.Join(slices.Sorted(maps.Keys(styles)), ", ")
			}
			return badParam(name, "is not a parameter of %s %s (it takes %s)", rt.method, rt.path, takes)
		case style == "deepObject":
			return badParam(name, "is an object, given as %s[KEY]=VALUE", name)
		case len(q[name]) > 1 && style != repeated:
			return badParam(name, "is given more than once")
		}
	}
	return nil
}

// deepKey is the key of a deepObject parameter's name, base[KEY].
func deepKey(name, base string) (string, bool) {
	rest, ok := strings.CutPrefix(name, base+"[")
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, "]")
	if !ok || key == "" || strings.ContainsAny(key, "[]") {
		return "", false
	}
	return key, true
}

// deepObject is a deepObject query parameter's keys and values.
func deepObject(r *http.Request, base string) map[string]string {
	var out map[string]string
	for name, v := range r.URL.Query() {
		if key, ok := deepKey(name, base); ok {
			if out == nil {
				out = map[string]string{}
			}
			out[key] = v[0]
		}
	}
	return out
}
