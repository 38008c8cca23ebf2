// Package voicetest runs the voice tests against real components: a
// livekit-server process, participants that publish and receive Opus
// audio and data, and the offline speech engines, all inside a private
// network namespace so that nothing the tests send can leave the machine.
//
// A test binary calls Main from TestMain: it runs itself again inside a
// new network namespace with only the loopback interface up (as root, or
// through a user namespace), so every address the tests use is
// 127.0.0.1 and the ports are the namespace's own. Missing pieces
// (livekit-server, flite, pocketsphinx, libopus, chromium) fail the tests
// that need them, saying how to install them; `make deps` installs them.
package voicetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	protologger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"go.uber.org/goleak"

	"github.com/trellisflow/trellis/nodes/llm"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

const netnsEnv = "TRELLIS_VOICE_NETNS"

// Main runs the test binary's tests inside a private network namespace
// and stops what they started (the LiveKit server, a PostgreSQL cluster).
func Main(m *testing.M) int {
	if os.Getenv(netnsEnv) == "" {
		return reexec()
	}
	// the SDK logs every step of a connection
	lksdk.SetLogger(protologger.GetDiscardLogger())
	code := storetest.Main(m)
	stopLiveKit()
	if code == 0 {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		llm.CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "voice tests: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	return code
}

// reexec runs this binary again, with the same arguments, in a new
// network namespace whose loopback interface is up.
func reexec() int {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		fmt.Fprintln(os.Stderr, "voice tests: unshare (util-linux) is needed to run them in a private network namespace")
		return 1
	}
	ip := "ip"
	if _, err := exec.LookPath(ip); err != nil {
		if _, err := os.Stat("/usr/sbin/ip"); err == nil {
			ip = "/usr/sbin/ip"
		} else {
			fmt.Fprintln(os.Stderr, "voice tests: ip (iproute2) is needed to bring up the namespace's loopback: apt-get install iproute2")
			return 1
		}
	}
	args := []string{"--net", "--fork", "--kill-child"}
	if os.Geteuid() != 0 {
		args = append(args, "--map-root-user")
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "voice tests:", err)
		return 1
	}
	args = append(args, "--", "/bin/sh", "-c", ip+` link set lo up && exec "$0" "$@"`, self)
	args = append(args, os.Args[1:]...)
	cmd := exec.Command(unshare, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			if ee.ExitCode() > 0 {
				return ee.ExitCode()
			}
		}
		fmt.Fprintf(os.Stderr, "voice tests: running in a private network namespace (unshare %s): %v\n", strings.Join(args[:3], " "), err)
		return 1
	}
	return 0
}

// LiveKitVersion is the livekit-server the tests run (make livekit-server
// builds it from the Go module proxy).
const LiveKitVersion = "v1.13.5"

// LiveKitBinary is where the livekit-server binary is: $TRELLIS_LIVEKIT_SERVER,
// or where `make livekit-server` puts it.
func LiveKitBinary() string {
	if p := os.Getenv("TRELLIS_LIVEKIT_SERVER"); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = filepath.Join(os.Getenv("HOME"), ".cache")
	}
	return filepath.Join(dir, "trellis", "livekit-"+LiveKitVersion, "server")
}

// LiveKitServer is a running livekit-server.
type LiveKitServer struct {
	URL, Key, Secret string
	cmd              *exec.Cmd
	dir              string
	done             chan struct{}
}

var (
	lkMu  sync.Mutex
	lkRun *LiveKitServer
)

// The namespace is the tests' own, so the ports are fixed.
const (
	lkPort     = 7880
	lkTCPPort  = 7881
	lkUDPPort  = 7882
	lkTURNPort = 3478
)

// LiveKit returns the test binary's LiveKit server, starting it on first
// use: single node, no Redis, media only on 127.0.0.1 (its TURN server
// there too, which is how the Go clients, which offer no loopback
// candidates, reach it).
func LiveKit(t testing.TB) *LiveKitServer {
	t.Helper()
	if os.Getenv(netnsEnv) == "" {
		t.Fatal("voice tests run inside a private network namespace: call voicetest.Main from TestMain")
	}
	lkMu.Lock()
	defer lkMu.Unlock()
	if lkRun != nil {
		select {
		case <-lkRun.done:
			t.Fatal("the LiveKit server stopped; see its log above")
		default:
		}
		return lkRun
	}
	bin := LiveKitBinary()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no livekit-server at %s: run `make livekit-server` (builds %s from the Go module proxy, about 4 minutes) or set TRELLIS_LIVEKIT_SERVER", bin, LiveKitVersion)
	}
	dir, err := os.MkdirTemp("", "trellis-livekit-")
	if err != nil {
		t.Fatal(err)
	}
	s := &LiveKitServer{URL: fmt.Sprintf("ws://127.0.0.1:%d", lkPort), Key: "devkey",
		Secret: "trellis-voice-tests-secret-0123456789abcdef", dir: dir, done: make(chan struct{})}
	conf := fmt.Sprintf(`port: %d
bind_addresses: ["127.0.0.1"]
rtc:
  tcp_port: %d
  udp_port: %d
  use_external_ip: false
  node_ip: 127.0.0.1
  enable_loopback_candidate: true
  ips:
    includes: ["127.0.0.1/32"]
turn:
  enabled: true
  udp_port: %d
  relay_range_start: 30000
  relay_range_end: 30200
keys:
  %s: %s
room:
  empty_timeout: 30
  departure_timeout: 5
logging:
  level: warn
`, lkPort, lkTCPPort, lkUDPPort, lkTURNPort, s.Key, s.Secret)
	if err := os.WriteFile(filepath.Join(dir, "livekit.yaml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "livekit.log"))
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "--config", filepath.Join(dir, "livekit.yaml"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting livekit-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); log.Close(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", lkPort), 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-s.done:
			b, _ := os.ReadFile(filepath.Join(dir, "livekit.log"))
			t.Fatalf("livekit-server exited: %s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("livekit-server did not listen within 15s")
		}
	}
	lkRun = s
	return s
}

// Log is what the LiveKit server has logged so far.
func (s *LiveKitServer) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "livekit.log"))
	return string(b)
}

func stopLiveKit() {
	lkMu.Lock()
	defer lkMu.Unlock()
	if lkRun == nil {
		return
	}
	_ = lkRun.cmd.Process.Signal(os.Interrupt)
	select {
	case <-lkRun.done:
	case <-time.After(5 * time.Second):
		_ = lkRun.cmd.Process.Kill()
		<-lkRun.done
	}
	os.RemoveAll(lkRun.dir)
	lkRun = nil
}

// Need fails the test when a program it needs is not installed, saying
// which package brings it.
func Need(t testing.TB, program, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		t.Fatalf("%s is not installed: apt-get install %s (make deps installs it)", program, pkg)
	}
	return p
}

// Context is a context for one test step, cancelled at the test's end.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// NoLeaks fails t when a goroutine started during it (after the call)
// outlives it: checked after every cleanup registered later has run.
// Idle keep-alive connections of the default HTTP transport and of the
// model calls are closed first: they are the clients', not the test's.
func NoLeaks(t testing.TB) {
	t.Helper()
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		llm.CloseIdleConnections()
		if err := goleak.Find(current); err != nil {
			t.Errorf("goroutines outlived the test: %v", err)
		}
	})
}
