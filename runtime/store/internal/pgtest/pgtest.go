// Package pgtest gives tests a real PostgreSQL database. With
// TRELLIS_TEST_DATABASE_URL set it creates databases on that server;
// otherwise it starts a throwaway cluster from the local PostgreSQL
// binaries (initdb and pg_ctl on PATH or under /usr/lib/postgresql/*/bin),
// as the postgres user when the tests run as root, on a free loopback
// port, and removes it when the test binary's tests are done, or, if the
// binary ends another way (a panic, a signal), when the binary is gone
// (see watchdog). Each test's database is dropped when the test ends,
// and a connection the test left open to it fails the test. Missing
// binaries fail the tests: the PostgreSQL suite is never skipped.
//
// PooledDatabase puts PgBouncer, in transaction pooling mode, between the
// tests and such a database.
package pgtest

import (
	"cmp"
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
	"strings"
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
	// bouncer pools connections to cluster, or to the server of
	// TRELLIS_TEST_DATABASE_URL.
	bouncer = &pooler{}
	counter atomic.Int64
)

type server struct {
	fast     bool
	started  bool
	dir, bin string
	opts     string // the server's command-line options
	url      string // admin URL (database postgres)
	cred     *syscall.Credential
	watch    *watchdog // stops the server if the test binary ends first
	err      error
}

// Main runs the tests and stops the cluster afterwards; call it from
// TestMain: os.Exit(pgtest.Main(m)). The tests fail when a connection
// to the cluster is still open once they have all ended (PgBouncer's
// gone): each test's database is checked as the test ends (see
// Database), and this catches what the tests opened elsewhere. A test
// binary that ends another way (a panic, a signal) leaves the cluster to
// its watchdog.
func Main(m interface{ Run() int }) int {
	code := m.Run()
	if errs := dropsDone(); len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "postgres: %s\n", strings.Join(errs, "\n"))
		code = cmp.Or(code, 1)
	}
	mu.Lock()
	defer mu.Unlock()
	if bouncer.started && bouncer.err == nil {
		bouncer.stop()
	}
	for _, s := range []*server{cluster, durable} {
		if s.started && s.err == nil {
			if left := leftOpen(s); len(left) > 0 {
				fmt.Fprintf(os.Stderr, "postgres: %d connection(s) to the test cluster still open after the tests ended:\n\t%s\n",
					len(left), strings.Join(left, "\n\t"))
				code = cmp.Or(code, 1)
			}
			s.stop()
		}
	}
	return code
}

// leftOpen describes the connections to s open but the caller's.
func leftOpen(s *server) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*settleWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return []string{fmt.Sprintf("(could not ask: %v)", err)}
	}
	defer conn.Close(ctx)
	left, err := settled(ctx, conn, `$1`, true)
	if err != nil {
		return []string{fmt.Sprintf("(could not ask: %v)", err)}
	}
	return left
}

// Database creates an empty database and returns its connection URL.
// When the test ends, after its own cleanups, the database is dropped,
// and the test fails if it left a connection to it open (directly or
// through PgBouncer): a pool a test never closes would hold the
// server's connection slots until the test binary ends, and a package
// run a few times in one process (go test -count) would run out of them.
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
	addr := createDatabase(t, admin)
	// the test's cleanups, registered after this one, run before it
	t.Cleanup(func() { release(t, admin, strings.TrimPrefix(mustParse(addr).Path, "/")) })
	return addr
}

func mustParse(addr string) *url.URL {
	u, err := url.Parse(addr)
	if err != nil {
		panic(err)
	}
	return u
}

// Restartable starts a server for the calling test alone, from the local
// binaries even when TRELLIS_TEST_DATABASE_URL is set, and returns a
// database on it and a function that restarts the server the way an
// operator would (pg_ctl restart -m fast: every open connection is cut).
// The server is removed when the test ends.
func Restartable(t testing.TB) (url string, restart func() error) {
	t.Helper()
	s := &server{fast: true}
	if err := s.start(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	t.Cleanup(s.stop)
	return createDatabase(t, s.url), s.restart
}

// Cluster is a server of a test's own (see NewCluster), which the test
// stops and starts as an operator would.
type Cluster struct{ s *server }

// NewCluster starts a server for the calling test alone, from the local
// binaries even when TRELLIS_TEST_DATABASE_URL is set, and returns it
// with a database on it; it is removed when the test ends.
func NewCluster(t testing.TB) (*Cluster, string) {
	t.Helper()
	s := &server{fast: true}
	if err := s.start(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	t.Cleanup(s.stop)
	return &Cluster{s: s}, createDatabase(t, s.url)
}

// Stop stops the server as pg_ctl stop -m fast does: every open
// connection is cut, and new ones are refused until Start.
func (c *Cluster) Stop() error {
	return c.s.run("pg_ctl", "-D", filepath.Join(c.s.dir, "data"), "-m", "fast", "-w", "-t", "60", "stop")
}

// Start starts the stopped server again, on the same address.
func (c *Cluster) Start() error {
	return c.s.run("pg_ctl", "-D", filepath.Join(c.s.dir, "data"), "-l", filepath.Join(c.s.dir, "server.log"), "-w", "-t", "60", "-o", c.s.opts, "start")
}

// Restart restarts the server (pg_ctl restart -m fast).
func (c *Cluster) Restart() error { return c.s.restart() }

// createDatabase creates an empty database on the server of the admin URL.
func createDatabase(t testing.TB, admin string) string {
	t.Helper()
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
	if s.cred, err = runAs(s.dir); err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	data := filepath.Join(s.dir, "data")
	// from here on the directory, and the server once it runs, go when
	// the test binary goes, if it has not stopped them
	if s.watch, err = watch(s.dir, s.cred, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
		os.RemoveAll(s.dir)
		return err
	}
	if err := s.run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=200", port, s.dir)
	if s.fast {
		s.opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if err := s.run("pg_ctl", "-D", data, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "60", "-o", s.opts, "start"); err != nil {
		return err
	}
	s.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return nil
}

// runAs is who runs a server whose files are in dir: the caller (nil), or
// the postgres user when the tests run as root, which PostgreSQL and
// PgBouncer refuse; dir and what it holds are then given to that user.
func runAs(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	err = filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, err
}

// freePort returns a loopback port nothing listens on.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *server) restart() error {
	return s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-l", filepath.Join(s.dir, "server.log"), "-m", "fast", "-w", "-t", "60", "-o", s.opts, "restart")
}

func (s *server) stop() {
	_ = s.run("pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.dir)
	s.watch.release()
}

// PooledDatabase is Database reached through PgBouncer in transaction
// pooling mode, with fewer server connections than a store's pool holds:
// consecutive transactions of one client connection run on different
// server connections, and nothing survives a transaction on the server
// (no prepared statements, no session settings, no session locks).
// PgBouncer is found on PATH or in /usr/sbin; its absence fails the test.
func PooledDatabase(t testing.TB) string {
	t.Helper()
	pooled, _ := Pooled(t)
	return pooled
}

// Pooled is PooledDatabase, and the database's direct URL too.
func Pooled(t testing.TB) (pooled, direct string) {
	t.Helper()
	direct = Database(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	mu.Lock()
	if !bouncer.started {
		bouncer.started = true
		bouncer.err = bouncer.start(u)
	}
	addr, err := bouncer.addr, bouncer.err
	mu.Unlock()
	if err != nil {
		t.Fatalf("pgbouncer: %v", err)
	}
	u.Host = addr
	return u.String(), direct
}

// PoolSize is how many server connections PgBouncer opens per database.
const PoolSize = 2

type pooler struct {
	started bool
	dir     string
	addr    string
	cmd     *exec.Cmd
	watch   *watchdog // stops PgBouncer if the test binary ends first
	err     error
}

func findBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", fmt.Errorf("no pgbouncer on PATH or in /usr/sbin; install the pgbouncer package (make deps does)")
}

// start runs PgBouncer in front of the server of u, forwarding every
// database name to the database of that name there.
func (p *pooler) start(u *url.URL) error {
	bin, err := findBouncer()
	if err != nil {
		return err
	}
	// the server side: PgBouncer logs in as the test user, with its
	// password when the URL has one; clients are trusted
	server := fmt.Sprintf("host=%s port=%s user=%s", u.Hostname(), cmp.Or(u.Port(), "5432"), u.User.Username())
	if pw, ok := u.User.Password(); ok {
		server += " password=" + pw
	}
	if p.dir, err = os.MkdirTemp("", "trellis-pgbouncer-"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	p.addr = fmt.Sprintf("127.0.0.1:%d", port)
	conf := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 1000
admin_users = %s
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, server, port, filepath.Join(p.dir, "users.txt"), PoolSize, u.User.Username(), filepath.Join(p.dir, "pgbouncer.log"), filepath.Join(p.dir, "pgbouncer.pid"))
	files := map[string]string{
		"pgbouncer.ini": conf,
		"users.txt":     fmt.Sprintf("%q \"\"\n", u.User.Username()),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(p.dir, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	cred, err := runAs(p.dir)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, filepath.Join(p.dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if err := cmd.Start(); err != nil {
		return err
	}
	p.cmd = cmd
	if p.watch, err = watch(p.dir, cred, "kill", "-KILL", strconv.Itoa(cmd.Process.Pid)); err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(p.dir, "pgbouncer.log"))
			return fmt.Errorf("exited at start: %v\n%s", err, log)
		default:
		}
		if c, err := net.DialTimeout("tcp", p.addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s after 30s", p.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *pooler) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	os.RemoveAll(p.dir)
	p.watch.release()
}

// WithParam is addr, a postgres:// URL, with the connection parameter
// key set to value (pool_max_conns, default_query_exec_mode, ...).
func WithParam(addr, key, value string) string {
	u, err := url.Parse(addr)
	if err != nil {
		return addr
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
