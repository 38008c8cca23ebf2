package deploy_test

import (
	"errors"
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
// the probes reach /readyz and /healthz on the port the server listens
// on; the pod's grace outlasts the preStop pause and --stop-timeout; the
// store goes through PgBouncer and the notifications straight to
// PostgreSQL; the budget and the service select the deployment's pods;
// the pod runs as the image's user.
func TestKubernetesManifests(t *testing.T) {
	objs := objects(t)
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "ServiceAccount"} {
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
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if at(t, c, probe, "httpGet", "path") != path || at(t, c, probe, "httpGet", "port") != "http" {
			t.Errorf("%s: %v", probe, at(t, c, probe))
		}
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
	if at(t, env["PGPASSWORD"], "secretKeyRef", "name") == nil {
		t.Errorf("the database password does not come from a Secret: %v", env["PGPASSWORD"])
	}
	// selectors
	labels := at(t, dep, "spec", "template", "metadata", "labels")
	for _, sel := range []any{at(t, dep, "spec", "selector", "matchLabels"), at(t, objs["PodDisruptionBudget"], "spec", "selector", "matchLabels"),
		at(t, objs["Service"], "spec", "selector")} {
		if !reflect.DeepEqual(sel, labels) {
			t.Errorf("selector %v, pods labelled %v", sel, labels)
		}
	}
	if r := at(t, dep, "spec", "replicas").(int); r < 2 || at(t, objs["PodDisruptionBudget"], "spec", "maxUnavailable") != 1 {
		t.Errorf("%d replicas with a budget of %v unavailable", r, at(t, objs["PodDisruptionBudget"], "spec", "maxUnavailable"))
	}
	if at(t, objs["Service"], "spec", "ports", 0, "targetPort") != "http" {
		t.Errorf("the service targets %v", at(t, objs["Service"], "spec", "ports", 0))
	}
	if at(t, pod, "securityContext", "runAsUser") != 65532 || at(t, c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Errorf("the pod runs as %v", at(t, pod, "securityContext"))
	}
	if at(t, c, "image") != defaultImage(t) {
		t.Errorf("the deployment runs %v, make image builds %s", at(t, c, "image"), defaultImage(t))
	}
}

// The compose file agrees with the server: the store goes through
// PgBouncer, the notifications straight to PostgreSQL, the password
// through the environment; the engine waits longer than --stop-timeout
// before it kills the server.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"postgres", "pgbouncer", "trellis"} {
		if at(t, f, "services", s) == nil {
			t.Fatalf("no service %s", s)
		}
	}
	tr := at(t, f, "services", "trellis")
	args := at(t, tr, "command").([]any)
	checkConnections(t, flag(args, "store"), flag(args, "notify-url"))
	if grace, stop := duration(t, at(t, tr, "stop_grace_period").(string)), duration(t, flag(args, "stop-timeout")); grace <= stop {
		t.Errorf("stop_grace_period %v does not outlast --stop-timeout %v", grace, stop)
	}
	if at(t, tr, "environment", "PGPASSWORD") == nil {
		t.Errorf("the password is not given as PGPASSWORD")
	}
	if img := at(t, tr, "image").(string); img != "${TRELLIS_IMAGE:-"+defaultImage(t)+"}" {
		t.Errorf("compose runs %s, make image builds %s", img, defaultImage(t))
	}
	ini, err := os.ReadFile("pgbouncer/pgbouncer.ini")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^pool_mode = transaction$`).Match(ini) || !regexp.MustCompile(`(?m)^listen_port = 6432$`).Match(ini) {
		t.Errorf("pgbouncer.ini:\n%s", ini)
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

// defaultImage is the image make image builds by default.
func defaultImage(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(repo + "/Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE\s*\?=\s*(\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no IMAGE ?= in the Makefile")
	}
	return string(m[1])
}
