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
	"testing"
	"time"

	"github.com/trellisflow/trellis/nodes/sandbox"
)

var (
	root      string // the sandbox's file tree
	dockerErr error  // why there is no engine
	image     = "trellis-sandbox:test"
)

// Main sets up, runs the tests and tears down.
func Main(m *testing.M) int {
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
	stop := startDocker(tmp)
	code := m.Run()
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
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "trellis", "sandbox-root-"+hex.EncodeToString(h.Sum(nil))[:16])
		if _, err := os.Stat(filepath.Join(dir, "usr", "bin", "python3")); err == nil {
			return dir, nil
		}
	}
	if out, err := exec.Command("sh", script(), dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the sandbox tree: %v\n%s", err, out)
	}
	return dir, nil
}

// script is the path of the tree's build script.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "image", "rootfs.sh")
}

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

// startDocker uses the engine DOCKER_HOST names, or starts one, and
// imports the image; it returns what stops it.
func startDocker(tmp string) func() {
	stop, err := Engine(filepath.Join(tmp, "dk"))
	if err != nil {
		dockerErr = err
		return stop
	}
	dockerErr = importImage()
	return stop
}

// Engine makes a Docker engine available to the test binary: the one
// DOCKER_HOST names, or else a private dockerd it starts with its files
// in dir (no bridge network, no iptables) and names in DOCKER_HOST. It
// returns what stops the engine it started (nothing for one it was
// given); an error says why there is none.
func Engine(dir string) (stop func(), err error) {
	if os.Getenv("DOCKER_HOST") != "" {
		return func() {}, nil
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		return func() {}, err
	}
	sock := filepath.Join(dir, "docker.sock")
	_ = os.MkdirAll(dir, 0o755)
	log, _ := os.Create(filepath.Join(dir, "dockerd.log"))
	cmd := exec.Command("dockerd", "-H", "unix://"+sock, "--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"), "--pidfile", filepath.Join(dir, "dockerd.pid"),
		"--bridge=none", "--iptables=false", "--ip6tables=false")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return func() {}, err
	}
	os.Setenv("DOCKER_HOST", "unix://"+sock)
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.Unsetenv("DOCKER_HOST")
	}
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command("docker", "version").Run() != nil {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log.Name())
			stop()
			return func() {}, fmt.Errorf("dockerd did not start: %s", tail(string(b)))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return stop, nil
}

func importImage() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", `tar -C "$1" -c . | docker import - "$2"`, "sh", root, image)
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
