//go:build ignore

// Generate writes the JSON Schemas that `make deploy-check` validates the
// manifests against with kubeconform, offline: one file per kind the
// manifests use, named as kubeconform's schema location names it
// ({{ .ResourceKind }}{{ .KindSuffix }}.json), made from the OpenAPI v3
// documents of Kubernetes 1.30 that kubectl-validate carries (from the
// Go module proxy): the kind's schema and every definition it reaches,
// strict (a field no schema declares is an error), apiVersion and kind
// fixed, descriptions left out.
//
//	make deploy-schemas
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kinds are the kinds the manifests use: the OpenAPI document of their
// group and version, and their definition.
var kinds = []struct{ doc, def, apiVersion, kind string }{
	{"api/v1.json", "io.k8s.api.core.v1.ServiceAccount", "v1", "ServiceAccount"},
	{"api/v1.json", "io.k8s.api.core.v1.ConfigMap", "v1", "ConfigMap"},
	{"api/v1.json", "io.k8s.api.core.v1.Service", "v1", "Service"},
	{"apis/apps/v1.json", "io.k8s.api.apps.v1.Deployment", "apps/v1", "Deployment"},
	{"apis/policy/v1.json", "io.k8s.api.policy.v1.PodDisruptionBudget", "policy/v1", "PodDisruptionBudget"},
	{"apis/autoscaling/v2.json", "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler", "autoscaling/v2", "HorizontalPodAutoscaler"},
	{"apis/networking.k8s.io/v1.json", "io.k8s.api.networking.v1.NetworkPolicy", "networking.k8s.io/v1", "NetworkPolicy"},
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run generate.go BUILTINS_DIR OUT_DIR")
		os.Exit(2)
	}
	in, out := os.Args[1], os.Args[2]
	for _, k := range kinds {
		b, err := os.ReadFile(filepath.Join(in, k.doc))
		if err != nil {
			fail(err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			fail(fmt.Errorf("%s: %w", k.doc, err))
		}
		defs := map[string]any{}
		var reach func(name string)
		reach = func(name string) {
			if _, ok := defs[name]; ok {
				return
			}
			s, ok := doc.Components.Schemas[name]
			if !ok {
				fail(fmt.Errorf("%s: no schema %s", k.doc, name))
			}
			defs[name] = nil
			defs[name] = convert(s, reach)
		}
		reach(k.def)
		root := defs[k.def].(map[string]any)
		props := root["properties"].(map[string]any)
		props["apiVersion"] = map[string]any{"type": "string", "enum": []any{k.apiVersion}}
		props["kind"] = map[string]any{"type": "string", "enum": []any{k.kind}}
		root["required"] = []any{"apiVersion", "kind"}
		delete(defs, k.def)
		schema := map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "definitions": defs}
		for key, v := range root {
			schema[key] = v
		}
		group, version, ok := strings.Cut(k.apiVersion, "/")
		suffix := "-" + strings.ToLower(strings.Split(group, ".")[0])
		if ok {
			suffix += "-" + version
		}
		name := strings.ToLower(k.kind) + suffix + ".json"
		data, err := json.MarshalIndent(schema, "", " ")
		if err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), append(data, '\n'), 0o644); err != nil {
			fail(err)
		}
		fmt.Println(name)
	}
}

// convert makes an OpenAPI v3 schema a JSON Schema (draft 7): references
// to #/definitions, nullable as a null type, objects with declared
// properties closed, descriptions and extensions left out.
func convert(v any, reach func(string)) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			switch {
			case k == "description" || strings.HasPrefix(k, "x-"):
			case k == "$ref":
				name := strings.TrimPrefix(e.(string), "#/components/schemas/")
				reach(name)
				out[k] = "#/definitions/" + name
			case k == "properties":
				props := map[string]any{}
				for p, ps := range e.(map[string]any) {
					props[p] = convert(ps, reach)
				}
				out[k] = props
			default:
				out[k] = convert(e, reach)
			}
		}
		if n, _ := x["nullable"].(bool); n {
			if t, ok := out["type"].(string); ok {
				out["type"] = []any{t, "null"}
			}
			delete(out, "nullable")
		}
		_, hasProps := x["properties"]
		_, hasAdditional := x["additionalProperties"]
		if keep, _ := x["x-kubernetes-preserve-unknown-fields"].(bool); hasProps && !hasAdditional && !keep {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = convert(e, reach)
		}
		return out
	}
	return v
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "generate:", err)
	os.Exit(1)
}
