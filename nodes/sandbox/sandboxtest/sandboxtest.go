// Package sandboxtest gives tests real sandbox backends: the local one on
// the sandbox's own file tree, and a Docker engine (the one DOCKER_HOST
// names, or a private dockerd this package starts) with the sandbox image
// imported from that tree. Call Main from TestMain.
package sandboxtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trellisflow/trellis/nodes/sandbox"
)

var (
	root      string // the sandbox's file tree
	dockerErr error  // why there is no engine
	image     = "trellis-sandbox:test"
)

// Main sets up, runs the tests and tears down; started by Helper, it is
// the helper.
func Main(m *testing.M) int {
	if spec := os.Getenv(helperEnv); spec != "" {
		return helper(spec)
	}
	tmp, err := os.MkdirTemp("", "trellis-sandboxtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if root, err = tree(tmp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Geteuid() == 0 {
		// a file only root may read, in the tree and the image, for the
		// tests to check that the sandbox's user is not root
		if err := os.WriteFile(filepath.Join(root, "etc", "trellis-probe"), []byte(ProbeSecret), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	stop := startDocker(tmp)
	code := m.Run()
	// no goroutine of a backend outlives the tests
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests: %v\n", err)
			code = 1
		}
	}
	stop()
	return code
}

// tree builds the sandbox's file tree, or finds it built by an earlier
// run: it is kept in the user's cache directory under a key of the build
// script and the runtimes it copies.
func tree(tmp string) (string, error) {
	h := sha256.New()
	b, err := os.ReadFile(script())
	if err != nil {
		return "", err
	}
	h.Write(b)
	for _, bin := range []string{"/usr/bin/python3", "node"} {
		if p, err := exec.LookPath(bin); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				if fi, err := os.Stat(real); err == nil {
					fmt.Fprintf(h, "%s %d %d\n", real, fi.Size(), fi.ModTime().UnixNano())
				}
			}
		}
	}
	dir := filepath.Join(tmp, "root")
	if cache := cacheDir(); cache != "" {
		dir = filepath.Join(cache, "sandbox-root-"+hex.EncodeToString(h.Sum(nil))[:16])
		if _, err := os.Stat(filepath.Join(dir, "usr", "bin", "python3")); err == nil {
			return dir, nil
		}
	}
	if out, err := exec.Command("sh", script(), dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the sandbox tree: %v\n%s", err, out)
	}
	return dir, nil
}

// cacheDir is where the tree is kept between runs: as root, where the
// sandbox's user (which bubblewrap runs as) can reach it; else the
// user's cache ("" when there is none).
func cacheDir() string {
	if os.Geteuid() == 0 {
		dir := "/var/cache/trellis"
		if os.MkdirAll(dir, 0o755) == nil {
			return dir
		}
	}
	if cache, err := os.UserCacheDir(); err == nil {
		return filepath.Join(cache, "trellis")
	}
	return ""
}

// script is the path of the tree's build script.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "image", "rootfs.sh")
}

// ProbeSecret is what /etc/trellis-probe holds in the tree and the image,
// readable by root only (when the tests run as root).
const ProbeSecret = "probe-secret-8c1f"

// Root is the sandbox's file tree.
func Root() string { return root }

// Local returns a pool on the local backend; the test fails when it
// cannot run here (bubblewrap missing: run make deps).
func Local(t testing.TB, n int) *sandbox.Pool {
	t.Helper()
	b, err := sandbox.NewLocal()
	if err != nil {
		t.Fatalf("%v (make deps installs it)", err)
	}
	return sandbox.NewPool(b, n, sandbox.Images{Root: root})
}

// Warm is the number of started containers the Docker pools keep ready
// (the default of FromEnv).
var warm = 2

// SetWarm sets the warm containers of the Docker pools made after it.
func SetWarm(n int) { warm = n }

// Docker returns a pool on the Docker backend; the test fails when no
// engine runs (make deps installs one, and Main starts it).
func Docker(t testing.TB, n int) *sandbox.Pool {
	t.Helper()
	if dockerErr != nil {
		t.Fatalf("no Docker engine: %v (make deps installs docker.io)", dockerErr)
	}
	b, err := sandbox.NewDocker(os.Getenv("TRELLIS_SANDBOX_RUNTIME"))
	if err != nil {
		t.Fatal(err)
	}
	b.Warm = warm
	t.Cleanup(func() { b.Close() })
	return sandbox.NewPool(b, n, sandbox.Images{Image: image})
}

// Backends returns a pool of each backend, by name.
func Backends(t testing.TB, n int) map[string]*sandbox.Pool {
	return map[string]*sandbox.Pool{"local": Local(t, n), "docker": Docker(t, n)}
}

// Runsc returns a pool on the Docker backend with gVisor's runtime, or
// why there is none: runsc is not installed (Debian's package did not
// install), or the engine at DOCKER_HOST does not know it.
func Runsc(t testing.TB, n int) (*sandbox.Pool, string) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		return nil, "runsc (gVisor) is not installed: apt-get install runsc (make deps tries)"
	}
	if dockerErr != nil {
		t.Fatalf("no Docker engine: %v (make deps installs docker.io)", dockerErr)
	}
	if out, err := exec.Command("docker", "info", "--format", "{{json .Runtimes}}").Output(); err != nil || !strings.Contains(string(out), `"runsc"`) {
		return nil, "the Docker engine at DOCKER_HOST has no runsc runtime"
	}
	b, err := sandbox.NewDocker("runsc")
	if err != nil {
		t.Fatal(err)
	}
	b.Warm = warm
	t.Cleanup(func() { b.Close() })
	return sandbox.NewPool(b, n, sandbox.Images{Image: image}), ""
}

// EngineRoot is the data directory of the Docker engine Main started ("":
// it started none).
func EngineRoot() string { return engineRoot }

var engineRoot string

// engine is the Docker engine Main started, if it started one.
var engine *os.Process

// PauseEngine stops the Docker engine Main started (SIGSTOP), so that it
// takes connections and answers nothing; the returned function resumes
// it. The test fails when Main started none.
func PauseEngine(t testing.TB) (resume func()) {
	t.Helper()
	if engine == nil {
		t.Fatal("no Docker engine of the tests' own to pause (DOCKER_HOST names another)")
	}
	if err := engine.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = engine.Signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// startDocker uses the engine DOCKER_HOST names, or starts one, and
// imports the image; it returns what stops it.
func startDocker(tmp string) func() {
	if os.Getenv("DOCKER_HOST") != "" {
		dockerErr = importImage(os.Getenv("DOCKER_HOST"))
		return func() {}
	}
	e, err := startEngine(filepath.Join(tmp, "dk"))
	if err != nil {
		dockerErr = err
		return func() {}
	}
	engine, engineRoot = e.cmd.Process, e.root
	os.Setenv("DOCKER_HOST", e.host)
	if err := importImage(e.host); err != nil {
		dockerErr = err
	}
	return func() {
		e.stop()
		os.Unsetenv("DOCKER_HOST")
	}
}

// StartEngine makes a Docker engine available to a test binary that
// needs one of its own (not the sandbox's image): the one DOCKER_HOST
// names, or else a private dockerd with its files in dir, named in
// DOCKER_HOST. It returns what stops the engine it started (nothing for
// one it was given); an error says why there is none.
func StartEngine(dir string) (stop func(), err error) {
	if os.Getenv("DOCKER_HOST") != "" {
		return func() {}, nil
	}
	e, err := startEngine(dir)
	if err != nil {
		return func() {}, err
	}
	os.Setenv("DOCKER_HOST", e.host)
	return func() {
		e.stop()
		os.Unsetenv("DOCKER_HOST")
	}, nil
}

// privateEngine is a dockerd of the tests' own.
type privateEngine struct {
	cmd        *exec.Cmd
	host, root string
}

// startEngine starts a dockerd on a socket in dir, with gVisor as the
// runtime runsc when it is installed, and waits until it answers.
func startEngine(dir string) (*privateEngine, error) {
	if _, err := exec.LookPath("dockerd"); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "docker.sock")
	_ = os.MkdirAll(dir, 0o755)
	log, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	config := filepath.Join(dir, "daemon.json")
	runtimes := "{}"
	if p, err := exec.LookPath("runsc"); err == nil {
		runtimes = fmt.Sprintf(`{"runsc": {"path": %q, "runtimeArgs": ["--network=none"]}}`, p)
	}
	_ = os.WriteFile(config, []byte(`{"runtimes": `+runtimes+`}`), 0o644)
	e := &privateEngine{host: "unix://" + sock, root: filepath.Join(dir, "data")}
	e.cmd = exec.Command("dockerd", "-H", e.host, "--config-file", config, "--data-root", e.root,
		"--exec-root", filepath.Join(dir, "exec"), "--pidfile", filepath.Join(dir, "dockerd.pid"),
		"--bridge=none", "--iptables=false", "--ip6tables=false")
	e.cmd.Stdout, e.cmd.Stderr = log, log
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := exec.Command("docker", "version")
		v.Env = append(os.Environ(), "DOCKER_HOST="+e.host)
		if v.Run() == nil {
			return e, nil
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			e.stop()
			return nil, fmt.Errorf("dockerd did not start: %s", tail(string(b)))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop stops the engine, and kills it if it takes more than 15 s.
func (e *privateEngine) stop() {
	_ = e.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = e.cmd.Process.Kill()
		<-done
	}
}

// Engine starts a Docker engine of the test's own (stopped when it ends)
// with the sandbox's image, and returns the environment that points
// trellis at it and at the sandbox's tree: DOCKER_HOST,
// TRELLIS_SANDBOX_IMAGE and TRELLIS_SANDBOX_ROOT. The test fails when no
// engine can run here (make deps installs one).
func Engine(t testing.TB) []string {
	t.Helper()
	tmp := t.TempDir()
	if root == "" {
		var err error
		if root, err = tree(tmp); err != nil {
			t.Fatal(err)
		}
	}
	// the socket's path must be short
	dir, err := os.MkdirTemp("", "tsbx-")
	if err != nil {
		t.Fatal(err)
	}
	e, err := startEngine(dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("no Docker engine: %v (make deps installs docker.io)", err)
	}
	t.Cleanup(func() {
		e.stop()
		os.RemoveAll(dir)
	})
	if err := importImage(e.host); err != nil {
		t.Fatal(err)
	}
	return []string{"DOCKER_HOST=" + e.host, "TRELLIS_SANDBOX_IMAGE=" + image, "TRELLIS_SANDBOX_ROOT=" + root}
}

func importImage(host string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `tar -C "$1" -c . | docker import - "$2"`, "sh", root, image)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+host)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("importing the sandbox image: %v: %s", err, out)
	}
	return nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// Image is the name of the image Main imported.
func Image() string { return image }
