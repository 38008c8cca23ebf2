package server

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRuntimeImportsNoKindNorSDK: this package, like every package of
// runtime/, builds on the generic engine alone: it imports (directly or
// not) no node kind, nothing of cmd/, not the trellis package (which
// assembles the built-in kinds), and no provider's SDK. What is specific
// to a kind or a provider is given to the server by the program that
// mounts it (Config.Kinds, Voice, Metrics, Speech, Page, Studio).
func TestRuntimeImportsNoKindNorSDK(t *testing.T) {
	const module = "github.com/trellisflow/trellis"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/runtime/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []struct{ prefix, what string }{
		{module + "/nodes/", "a node kind"},
		{module + "/cmd/", "the command"},
		{"github.com/livekit/", "LiveKit's SDK"},
		{"github.com/docker/", "Docker's SDK"},
		{"github.com/sashabaranov/go-openai", "the OpenAI client"},
	}
	packages := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		packages++
		for _, dep := range deps {
			if dep == module {
				t.Errorf("%s imports %s, the trellis package (which assembles the built-in kinds)", pkg, dep)
			}
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f.prefix) {
					t.Errorf("%s imports %s, %s", pkg, dep, f.what)
				}
			}
		}
	}
	if packages < 10 || !strings.Contains(string(out), module+"/runtime/api/server ") {
		t.Fatalf("go list listed %d packages, this one among them?\n%s", packages, out)
	}
}
