package deploy_test

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// objects reads the Kubernetes manifests, by kind.
func objects(t *testing.T) map[string]map[string]any {
	t.Helper()
	f, err := os.Open("kubernetes/trellis.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]any{}
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		out[doc["kind"].(string)] = doc
	}
	return out
}

// at walks a decoded YAML value by keys and list indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

// flag finds --name=value among a command's arguments.
func flag(args []any, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a.(string), "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The Kubernetes manifests agree with the server and with each other:
// the probes (startup, readiness, liveness) reach /healthz and /readyz
// on the port the server listens on; the pod's grace outlasts the
// preStop pause and --stop-timeout; the store goes through PgBouncer and
// the notifications straight to PostgreSQL; the budget, the service, the
// autoscaler and the network policy select the deployment's pods; the
// pod runs as the image's user; the Go memory limit follows the
// container's; the secrets come from Secrets.
func TestKubernetesManifests(t *testing.T) {
	objs := objects(t)
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "ServiceAccount", "HorizontalPodAutoscaler", "NetworkPolicy"} {
		if objs[kind] == nil {
			t.Fatalf("no %s in kubernetes/trellis.yaml", kind)
		}
	}
	dep := objs["Deployment"]
	pod := at(t, dep, "spec", "template", "spec")
	c := at(t, pod, "containers", 0)
	args := at(t, c, "args").([]any)
	if args[0] != "serve" || flag(args, "addr") != ":8080" || at(t, c, "ports", 0, "containerPort") != 8080 || at(t, c, "ports", 0, "name") != "http" {
		t.Fatalf("the server listens on %q, the container port is %v", flag(args, "addr"), at(t, c, "ports", 0))
	}
	for probe, path := range map[string]string{"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if at(t, c, probe, "httpGet", "path") != path || at(t, c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v", probe, at(t, c, probe))
		}
	}
	// the startup probe gives a start (migrations, flows) a minute at
	// least, and liveness starts counting after it
	if start := at(t, c, "startupProbe", "periodSeconds").(int) * at(t, c, "startupProbe", "failureThreshold").(int); start < 60 {
		t.Errorf("the startup probe allows %ds", start)
	}
	if d := at(t, c, "livenessProbe").(map[string]any)["initialDelaySeconds"]; d != nil {
		t.Errorf("liveness waits %vs as well as the startup probe", d)
	}
	stop := duration(t, flag(args, "stop-timeout"))
	pause := time.Duration(at(t, c, "lifecycle", "preStop", "sleep", "seconds").(int)) * time.Second
	grace := time.Duration(at(t, pod, "terminationGracePeriodSeconds").(int)) * time.Second
	if grace < pause+stop+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v leaves runs less than --stop-timeout %v after the preStop pause %v", grace, stop, pause)
	}
	// the addresses come from the ConfigMap through the environment
	env := map[string]any{}
	for _, e := range at(t, c, "env").([]any) {
		env[at(t, e, "name").(string)] = at(t, e, "valueFrom")
	}
	if flag(args, "store") != "$(TRELLIS_STORE)" || flag(args, "notify-url") != "$(TRELLIS_NOTIFY_URL)" {
		t.Fatalf("args %v", args)
	}
	cm := at(t, objs["ConfigMap"], "data").(map[string]any)
	for name, key := range map[string]string{"TRELLIS_STORE": "store", "TRELLIS_NOTIFY_URL": "notify-url"} {
		if at(t, env[name], "configMapKeyRef", "key") != key || at(t, env[name], "configMapKeyRef", "name") != "trellis" {
			t.Errorf("%s: %v", name, env[name])
		}
	}
	checkConnections(t, cm["store"].(string), cm["notify-url"].(string))
	for _, name := range []string{"PGPASSWORD", "TRELLIS_ADMIN_KEY"} {
		if at(t, env[name], "secretKeyRef", "name") == nil {
			t.Errorf("%s does not come from a Secret: %v", name, env[name])
		}
	}
	// the Go memory limit: nine tenths of the container's, which the
	// server is given in bytes
	limit := at(t, env["TRELLIS_MEMORY_LIMIT"], "resourceFieldRef")
	if at(t, limit, "resource") != "limits.memory" || at(t, limit, "containerName") != at(t, c, "name") || at(t, limit, "divisor") != "1" ||
		at(t, c, "resources", "limits", "memory") == nil {
		t.Errorf("TRELLIS_MEMORY_LIMIT: %v, limits %v", limit, at(t, c, "resources", "limits"))
	}
	// no key or password is written in the manifests, nor on a command
	// line they document
	raw, err := os.ReadFile("kubernetes/trellis.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"--from-literal", "--env=PGPASSWORD", "trk_"} {
		if strings.Contains(string(raw), bad) {
			t.Errorf("kubernetes/trellis.yaml holds %q", bad)
		}
	}
	// selectors
	labels := at(t, dep, "spec", "template", "metadata", "labels")
	for _, sel := range []any{at(t, dep, "spec", "selector", "matchLabels"), at(t, objs["PodDisruptionBudget"], "spec", "selector", "matchLabels"),
		at(t, objs["Service"], "spec", "selector"), at(t, objs["NetworkPolicy"], "spec", "podSelector", "matchLabels")} {
		if !reflect.DeepEqual(sel, labels) {
			t.Errorf("selector %v, pods labelled %v", sel, labels)
		}
	}
	// the autoscaler has the replicas: 2 at least, by CPU, which the
	// container requests
	hpa := objs["HorizontalPodAutoscaler"]
	if r, ok := at(t, dep, "spec").(map[string]any)["replicas"]; ok {
		t.Errorf("the deployment sets %v replicas, which the autoscaler owns", r)
	}
	if ref := at(t, hpa, "spec", "scaleTargetRef"); at(t, ref, "kind") != "Deployment" || at(t, ref, "name") != at(t, dep, "metadata", "name") {
		t.Errorf("the autoscaler scales %v", ref)
	}
	minR, maxR := at(t, hpa, "spec", "minReplicas").(int), at(t, hpa, "spec", "maxReplicas").(int)
	if minR < 2 || maxR <= minR || at(t, objs["PodDisruptionBudget"], "spec", "maxUnavailable") != 1 {
		t.Errorf("%d to %d replicas with a budget of %v unavailable", minR, maxR, at(t, objs["PodDisruptionBudget"], "spec", "maxUnavailable"))
	}
	if at(t, hpa, "spec", "metrics", 0, "resource", "name") != "cpu" || at(t, c, "resources", "requests", "cpu") == nil {
		t.Errorf("the autoscaler's metric %v, the container's requests %v", at(t, hpa, "spec", "metrics", 0), at(t, c, "resources", "requests"))
	}
	checkNetworkPolicy(t, objs["NetworkPolicy"], cm["store"].(string), cm["notify-url"].(string))
	if at(t, objs["Service"], "spec", "ports", 0, "targetPort") != "http" {
		t.Errorf("the service targets %v", at(t, objs["Service"], "spec", "ports", 0))
	}
	if at(t, pod, "securityContext", "runAsUser") != 65532 || at(t, c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Errorf("the pod runs as %v", at(t, pod, "securityContext"))
	}
	checkImagePinned(t, at(t, c, "image").(string))
	// every kind has the schema make deploy-check validates it against
	for kind, obj := range objs {
		apiVersion := at(t, obj, "apiVersion").(string)
		group, version, ok := strings.Cut(apiVersion, "/")
		suffix := "-" + strings.ToLower(strings.Split(group, ".")[0])
		if ok {
			suffix += "-" + version
		}
		if _, err := os.Stat("kubeconform/kubernetes-1.30/" + strings.ToLower(kind) + suffix + ".json"); err != nil {
			t.Errorf("%s (%s) has no schema for make deploy-check: add it to kubeconform/kubernetes-1.30/generate.go (make deploy-schemas)", kind, apiVersion)
		}
	}
}

// checkNetworkPolicy: in, the API's port from the namespace's pods; out,
// the cluster's DNS, the store's and the notifications' ports (as the
// ConfigMap's addresses have them), LiveKit's API and HTTPS (the model),
// and nothing else.
func checkNetworkPolicy(t *testing.T, np map[string]any, store, notify string) {
	t.Helper()
	if !reflect.DeepEqual(at(t, np, "spec", "policyTypes"), []any{"Ingress", "Egress"}) {
		t.Errorf("the policy's types: %v", at(t, np, "spec", "policyTypes"))
	}
	ingress := at(t, np, "spec", "ingress").([]any)
	if len(ingress) != 1 || !reflect.DeepEqual(at(t, ingress[0], "from"), []any{map[string]any{"podSelector": map[string]any{}}}) ||
		!reflect.DeepEqual(at(t, ingress[0], "ports"), []any{map[string]any{"port": "http", "protocol": "TCP"}}) {
		t.Errorf("ingress: %v", ingress)
	}
	ports := map[string]bool{}
	for _, rule := range at(t, np, "spec", "egress").([]any) {
		for _, p := range at(t, rule, "ports").([]any) {
			ports[fmt.Sprintf("%v/%v", at(t, p, "port"), at(t, p, "protocol"))] = true
		}
	}
	s, _ := url.Parse(store)
	n, _ := url.Parse(notify)
	want := map[string]bool{"53/UDP": true, "53/TCP": true, s.Port() + "/TCP": true, n.Port() + "/TCP": true, "7880/TCP": true, "443/TCP": true}
	if !reflect.DeepEqual(ports, want) {
		t.Errorf("egress to %v, want %v", ports, want)
	}
}

// checkImagePinned: the deployment names the image, and kustomization.yaml
// pins it by digest (a tag can be moved; a digest cannot).
func checkImagePinned(t *testing.T, image string) {
	t.Helper()
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
		Images    []struct {
			Name, NewName, NewTag, Digest string
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(k.Resources, []string{"trellis.yaml"}) || len(k.Images) != 1 {
		t.Fatalf("kustomization.yaml: %+v", k)
	}
	img := k.Images[0]
	if img.Name != image || img.NewTag != "" || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(img.Digest) || strings.Contains(image, ":") {
		t.Errorf("the deployment runs %q, pinned as %+v: want it pinned by digest alone", image, img)
	}
}

// The compose file agrees with the server: no service is built (the
// database is an image at a pinned version, not a major's moving tag);
// the store and the notifications go to PostgreSQL, the store preparing
// its statements once; the password reaches the server through the
// environment, never in an address; the image must be named; the server
// has a memory limit to take its Go limit from; the engine waits longer
// than --stop-timeout before it kills the server.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	services := at(t, f, "services").(map[string]any)
	for name, svc := range services {
		if _, built := svc.(map[string]any)["build"]; built {
			t.Errorf("service %s is built as the stack starts", name)
		}
	}
	if img := at(t, f, "services", "postgres", "image").(string); !regexp.MustCompile(`^postgres:\d+\.\d+`).MatchString(img) {
		t.Errorf("the database's image %q is not pinned to a release", img)
	}
	tr := at(t, f, "services", "trellis")
	args := at(t, tr, "command").([]any)
	s, err1 := url.Parse(flag(args, "store"))
	n, err2 := url.Parse(flag(args, "notify-url"))
	if err1 != nil || err2 != nil || s.Hostname() != "postgres" || n.Hostname() != "postgres" || s.Path != n.Path ||
		s.Query().Get("default_query_exec_mode") != "cache_statement" {
		t.Errorf("the store %s and the notifications %s", flag(args, "store"), flag(args, "notify-url"))
	}
	for _, u := range []*url.URL{s, n} {
		if _, ok := u.User.Password(); ok {
			t.Errorf("%s holds a password", u.Redacted())
		}
	}
	if grace, stop := duration(t, at(t, tr, "stop_grace_period").(string)), duration(t, flag(args, "stop-timeout")); grace <= stop {
		t.Errorf("stop_grace_period %v does not outlast --stop-timeout %v", grace, stop)
	}
	for _, v := range []string{"PGPASSWORD", "TRELLIS_ADMIN_KEY"} {
		if at(t, tr, "environment", v) == nil {
			t.Errorf("%s is not given to the server", v)
		}
	}
	if img := at(t, tr, "image").(string); !strings.HasPrefix(img, "${TRELLIS_IMAGE:?") {
		t.Errorf("compose runs %s: the image must be named (TRELLIS_IMAGE)", img)
	}
	if at(t, tr, "mem_limit") == nil {
		t.Errorf("the server has no memory limit to take its Go memory limit from")
	}
}

// checkConnections: the store through PgBouncer (port 6432), the
// notifications to PostgreSQL (5432), one database, no password in the
// address.
func checkConnections(t *testing.T, store, notify string) {
	t.Helper()
	s, err1 := url.Parse(store)
	n, err2 := url.Parse(notify)
	if err1 != nil || err2 != nil {
		t.Fatalf("%q %q: %v %v", store, notify, err1, err2)
	}
	if s.Scheme != "postgres" || s.Hostname() != "pgbouncer" || s.Port() != "6432" {
		t.Errorf("the store is %s, not PgBouncer", store)
	}
	if n.Hostname() != "postgres" || n.Port() != "5432" || n.Path != s.Path {
		t.Errorf("the notifications go to %s, not straight to the store's database on PostgreSQL", notify)
	}
	for _, u := range []*url.URL{s, n} {
		if _, ok := u.User.Password(); ok {
			t.Errorf("%s holds a password", u.Redacted())
		}
	}
}
