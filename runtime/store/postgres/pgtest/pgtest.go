// Package pgtest gives tests a real PostgreSQL database. With
// TRELLIS_TEST_DATABASE_URL set it creates databases on that server;
// otherwise it starts a throwaway cluster from the local PostgreSQL
// binaries (initdb and pg_ctl on PATH or under /usr/lib/postgresql/*/bin),
// as the postgres user when the tests run as root, on a free loopback
// port, and removes it when the test binary's tests are done. Missing
// binaries fail the tests: the PostgreSQL suite is never skipped.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	mu sync.Mutex
	// cluster serves the tests. It runs without fsync, synchronous commit
	// and full page writes: tests need no durability against power loss.
	cluster = &server{fast: true}
	// durable serves benchmarks of commit latency with the server's
	// default settings: each commit waits for its WAL to reach the disk.
	durable = &server{}
	counter atomic.Int64
)

type server struct {
	fast     bool
	started  bool
	dir, bin string
	url      string // admin URL (database postgres)
	cred     *syscall.Credential
	err      error
}

// Main runs the tests and stops the cluster afterwards; call it from
// TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []*server{cluster, durable} {
		if s.started && s.err == nil {
			s.stop()
		}
	}
	return code
}

// Database creates an empty database and returns its connection URL.
func Database(t testing.TB) string {
	t.Helper()
	return database(t, cluster)
}

// DurableDatabase is Database on a cluster of its own that keeps
// PostgreSQL's default durability: fsync, synchronous commit and full page
// writes on. With TRELLIS_TEST_DATABASE_URL set, that server is used as it
// is configured.
func DurableDatabase(t testing.TB) string {
	t.Helper()
	return database(t, durable)
}

func database(t testing.TB, s *server) string {
	t.Helper()
	admin, err := adminURL(s)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	name := fmt.Sprintf("trellis_test_%d_%d", os.Getpid(), counter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("postgres: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("postgres: create database: %v", err)
	}
	u, _ := url.Parse(admin)
	u.Path = "/" + name
	return u.String()
}

func adminURL(s *server) (string, error) {
	if u := os.Getenv("TRELLIS_TEST_DATABASE_URL"); u != "" {
		return u, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if !s.started {
		s.started = true
		s.err = s.start()
	}
	return s.url, s.err
}

func findBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin; install them or set TRELLIS_TEST_DATABASE_URL")
}

func (s *server) run(name string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = s.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", name, err, out)
	}
	return nil
}

func (s *server) start() error {
	bin, err := findBin()
	if err != nil {
		return err
	}
	s.bin = bin
	s.dir, err = os.MkdirTemp("", "trellis-pg-")
	if err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		// the server refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(s.dir, uid, gid); err != nil {
			return err
		}
	}
	data := filepath.Join(s.dir, "data")
	if err := s.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"); err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200", port, s.dir)
	if s.fast {
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if err := s.run("pg_ctl", "-D", data, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		return err
	}
	s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return nil
}

func (s *server) stop() {
	_ = s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.dir)
}
