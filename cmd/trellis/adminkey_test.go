package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/api"
)

// An admin key kept in a deployment's secrets is never printed nor put
// on a command line: keys generate makes one (recorded nowhere), keys
// create --from-env records it once (again: left as it is), and a
// server given one in TRELLIS_ADMIN_KEY records it as it starts, so that
// the key works against its API.
func TestAdminKeyFromASecret(t *testing.T) {
	ctx := context.Background()
	db := "sqlite:" + filepath.Join(t.TempDir(), "t.db")
	gen := func() string {
		t.Helper()
		out, errs, code := trellis(t, "keys", "generate")
		key := strings.TrimSpace(out)
		if code != 0 || !regexp.MustCompile(`^trk_[a-z2-7]{12}_[a-z2-7]{32}$`).MatchString(key) {
			t.Fatalf("keys generate: %d %q %s", code, out, errs)
		}
		return key
	}
	key := gen()
	if other := gen(); other == key {
		t.Fatal("keys generate made the same key twice")
	}
	t.Setenv("OPS_KEY", key)
	for i, want := range []string{"is recorded for tenant ops", "was recorded already"} {
		out, errs, code := trellis(t, "keys", "create", "--tenant", "ops", "--admin", "--from-env", "OPS_KEY", "--store", db)
		if code != 0 || out != "" || !strings.Contains(errs, want) || strings.Contains(out+errs, key) {
			t.Fatalf("keys create --from-env, time %d: %d %q %q", i+1, code, out, errs)
		}
	}
	out, _, _ := trellis(t, "keys", "list", "--store", db)
	if !strings.Contains(out, key[4:16]+"\tops\tadmin") {
		t.Fatalf("keys list: %q", out)
	}
	t.Setenv("OPS_KEY", "trk_not-a-key")
	if _, errs, code := trellis(t, "keys", "create", "--tenant", "ops", "--from-env", "OPS_KEY", "--store", db); code != 2 || !strings.Contains(errs, "not a key") {
		t.Fatalf("a malformed key: %d %s", code, errs)
	}

	// the server records its admin key from the environment
	served := gen()
	flows := t.TempDir()
	if err := os.WriteFile(filepath.Join(flows, "quick.yaml"), []byte(quickFlow), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(os.Args[0], "serve", "--flows", flows, "--store", db, "--addr", addr)
	cmd.Env = append(os.Environ(), "TRELLIS_AS_MAIN=test-kinds", "TRELLIS_ADMIN_KEY="+served, "TRELLIS_ADMIN_TENANT=platform")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := api.NewClient("http://"+addr, served)
	waitUp(t, c)
	keys, err := c.Keys(ctx)
	if err != nil {
		t.Fatalf("the served admin key: %v\n%s", err, stderr.String())
	}
	found := false
	for _, k := range keys {
		found = found || k.ID == served[4:16] && k.Admin && k.Tenant == "platform"
	}
	if !found || strings.Contains(stderr.String(), served) {
		t.Fatalf("keys %+v (the server's log holds the key: %v)", keys, strings.Contains(stderr.String(), served))
	}
}
