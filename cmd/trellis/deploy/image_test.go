package deploy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox/sandboxtest"
	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// engineErr says why there is no Docker engine.
var engineErr error

// TestMain gives the tests a Docker engine (DOCKER_HOST's, or a private
// one) and PostgreSQL.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "trellis-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stop, err := sandboxtest.StartEngine(filepath.Join(dir, "dk"))
	engineErr = err
	code := storetest.Main(m)
	stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repo is the repository's root.
const repo = "../../.."

// docker runs the docker command and returns its standard output.
func docker(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The image make image builds starts in the test's Docker engine as a
// user that is not root, with no shell and no C library (its binary is
// static), its SBOM beside it and in it listing the binary's modules; it
// makes an API key on a PostgreSQL database, serves /readyz there (the
// store through PgBouncer in transaction mode, notifications straight
// from PostgreSQL) with its Go memory limit nine tenths of the
// container's, runs an interview turn with the flows it carries, and
// stops gracefully on SIGTERM.
func TestImageServesAnInterview(t *testing.T) {
	if engineErr != nil {
		t.Fatalf("no Docker engine: %v (make deps installs docker.io)", engineErr)
	}
	// (a bound against a hang: building the image compiles trellis from
	// nothing, which took 7.5 minutes at load 25)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	image := randomName("trellis-deploy-test:")
	imageDir := filepath.Join(t.TempDir(), "image")
	build := exec.CommandContext(ctx, "make", "-C", repo, "image", "IMAGE="+image, "IMAGE_DIR="+imageDir)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })

	var cfg struct {
		Size   int64
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
			WorkingDir string
		}
	}
	if err := json.Unmarshal([]byte(docker(ctx, t, "image", "inspect", "--format", "{{json .}}", image)), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/trellis" ||
		strings.Join(cfg.Config.Cmd, " ") != "serve --addr :8080" || cfg.Config.WorkingDir != "/srv/trellis" {
		t.Fatalf("image config %+v", cfg.Config)
	}
	if cfg.Size > 100<<20 {
		t.Errorf("the image is %d MB", cfg.Size>>20)
	}
	// nothing but trellis: no shell to run
	if out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--entrypoint", "/bin/sh", image, "-c", "true").CombinedOutput(); err == nil {
		t.Errorf("the image has a shell: %s", out)
	}
	checkImageFiles(ctx, t, image, imageDir)

	pooled, direct := storetest.PooledPostgres(t)
	// an admin key, made by the image's own command
	key := strings.TrimSpace(docker(ctx, t, "run", "--rm", "--network", "host", "--read-only", image,
		"keys", "create", "--tenant", "acme", "--admin", "--store", pooled))
	if !strings.HasPrefix(key, "trk_") {
		t.Fatalf("keys create printed %q", key)
	}

	port := freePort(t)
	name := randomName("trellis-serve-")
	docker(ctx, t, "run", "-d", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp", "--memory", "512m", image,
		"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--store", pooled, "--notify-url", direct, "--stop-timeout", "20s")
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	logs := func() string {
		out, _ := exec.Command("docker", "logs", name).CombinedOutput()
		return string(out)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			var h api.Health
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && h.Status == "ok" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not answer 200 within 3 minutes (last: %v); the server's log:\n%s", err, logs())
		}
		time.Sleep(200 * time.Millisecond)
	}

	// the Go memory limit, from the container's cgroup: 512 MiB less a tenth
	if want := fmt.Sprintf(`"bytes":%d`, int64(512<<20)/10*9); !strings.Contains(logs(), want) {
		t.Errorf("the server did not set its Go memory limit (%s) from the container's:\n%s", want, logs())
	}
	if resp, err := http.Get(base + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	c := api.NewClient(base, key)
	values, err := schema.ReadFile(filepath.Join(repo, "flows", "examples", "candidate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateThread(ctx, api.CreateThread{ID: "ada-1", Flow: "interview", Values: values.(map[string]any)}); err != nil {
		t.Fatalf("create thread: %v\n%s", err, logs())
	}
	greeting, err := c.RunWait(ctx, "ada-1", api.StartRun{})
	if err != nil || greeting.Status != api.RunSucceeded {
		t.Fatalf("the greeting: %+v %v\n%s", greeting, err, logs())
	}
	if msg, _ := greeting.State["next_message"].(string); !strings.HasPrefix(msg, "Hi Ada") {
		t.Fatalf("the greeting said %q", msg)
	}
	turn, err := c.RunWait(ctx, "ada-1", api.StartRun{Input: map[string]any{"last_response": "I built a log indexer in Go that handles two terabytes a day."}})
	if err != nil || turn.Status != api.RunSucceeded {
		t.Fatalf("the turn: %+v %v\n%s", turn, err, logs())
	}
	if asked, _ := turn.State["questions_asked"].([]any); len(asked) != 1 {
		t.Fatalf("the turn asked %v", turn.State["questions_asked"])
	}

	// SIGTERM: the server stops by itself, as the engine records (exit
	// code 0: the engine's SIGKILL after 30 s would leave 137), and its
	// log says so
	start := time.Now()
	docker(ctx, t, "stop", "--time", "30", name)
	var state struct{ ExitCode int }
	if err := json.Unmarshal([]byte(docker(ctx, t, "inspect", "--format", "{{json .State}}", name)), &state); err != nil {
		t.Fatal(err)
	}
	if state.ExitCode != 0 || !strings.Contains(logs(), "shutting down") {
		t.Fatalf("stopped with exit code %d after %v; the server's log:\n%s", state.ExitCode, time.Since(start), logs())
	}
}

// checkImageFiles: the image holds the static binary, CA certificates,
// the user's files, the flows and the SBOM, and no C library or loader
// (nothing under /lib, /lib64 or /usr/lib); the SBOM beside the image is
// the one in it, and lists every module of the binary.
func checkImageFiles(ctx context.Context, t *testing.T, image, imageDir string) {
	t.Helper()
	id := strings.TrimSpace(docker(ctx, t, "create", image))
	defer func() { _ = exec.Command("docker", "rm", "-f", id).Run() }()
	dir := t.TempDir()
	tarball := filepath.Join(dir, "fs.tar")
	docker(ctx, t, "export", "--output", tarball, id)
	out, err := exec.CommandContext(ctx, "tar", "-tf", tarball).Output()
	if err != nil {
		t.Fatal(err)
	}
	files := strings.Fields(string(out))
	has := map[string]bool{}
	for _, f := range files {
		has[strings.TrimSuffix(f, "/")] = true
		for _, lib := range []string{"lib/", "lib64/", "usr/lib/"} {
			if strings.HasPrefix(f, lib) {
				t.Errorf("the image carries %s: no C library belongs in it", f)
			}
		}
	}
	for _, f := range []string{"trellis", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "srv/trellis/flows/interview.yaml", "usr/share/doc/trellis/sbom.spdx.json"} {
		if !has[f] {
			t.Errorf("the image has no %s", f)
		}
	}
	if err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", dir, "trellis", "usr/share/doc/trellis/sbom.spdx.json").Run(); err != nil {
		t.Fatal(err)
	}
	bin, err := elf.Open(filepath.Join(dir, "trellis"))
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the image's binary asks for a dynamic loader")
		}
	}
	inside, err := os.ReadFile(filepath.Join(dir, "usr/share/doc/trellis/sbom.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	beside, err := os.ReadFile(filepath.Join(imageDir, "sbom.spdx.json"))
	if err != nil || !bytes.Equal(inside, beside) {
		t.Fatalf("the SBOM beside the image (%v) is not the one in it", err)
	}
	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(inside, &sbom); err != nil || sbom.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("the SBOM: %v %s", err, sbom.SPDXVersion)
	}
	purls := map[string]bool{}
	for _, p := range sbom.Packages {
		for _, r := range p.ExternalRefs {
			purls[r.Locator] = true
		}
	}
	info, err := buildinfo.ReadFile(filepath.Join(dir, "trellis"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		if !purls["pkg:golang/"+m.Path+"@"+m.Version] {
			t.Errorf("the SBOM does not list the binary's module %s %s", m.Path, m.Version)
		}
	}
}
