package storetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

// Postgres creates an empty PostgreSQL database for a test and returns its
// connection URL. With TRELLIS_TEST_DATABASE_URL set it creates databases
// on that server; otherwise it starts a throwaway cluster from the local
// PostgreSQL binaries, once per test binary (see Main). Missing binaries
// fail the test: PostgreSQL tests are never skipped.
func Postgres(t testing.TB) string {
	t.Helper()
	return pgtest.Database(t)
}

// PostgresCluster starts a PostgreSQL server for the calling test alone
// and returns a database on it, with the server to stop and start (as
// pg_ctl does: stopped, every connection is cut and new ones refused).
func PostgresCluster(t testing.TB) (url string, stop, start func() error) {
	t.Helper()
	c, url := pgtest.NewCluster(t)
	return url, c.Stop, c.Start
}

// URLs addresses a fresh store of each kind semantics tests run on, by
// name: memory, SQLite (a file in the test's directory) and PostgreSQL.
func URLs(t testing.TB) map[string]string {
	t.Helper()
	return map[string]string{
		"memory":   "memory",
		"sqlite":   "sqlite:" + filepath.Join(t.TempDir(), "s.db"),
		"postgres": Postgres(t),
	}
}

// Main runs a test binary's tests and stops the PostgreSQL cluster they
// started; call it from TestMain: os.Exit(storetest.Main(m)).
func Main(m *testing.M) int { return pgtest.Main(m) }

// MainNoLeaks is Main, which also fails the binary when its tests pass
// but a goroutine they started is still running (go.uber.org/goleak,
// which waits a while for goroutines that are ending); ignore lists the
// goroutines that are not the tests' to end. m is a *testing.M, or what
// wraps one to clean up after its tests.
func MainNoLeaks(m interface{ Run() int }, ignore ...goleak.Option) int {
	code := pgtest.Main(m)
	if code != 0 {
		return code
	}
	if err := goleak.Find(ignore...); err != nil {
		fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
		return 1
	}
	return 0
}

// PooledPostgres is Postgres reached through PgBouncer in transaction
// pooling mode (found on PATH or in /usr/sbin; its absence fails the
// test), with the same database's direct URL.
func PooledPostgres(t testing.TB) (pooled, direct string) {
	t.Helper()
	return pgtest.Pooled(t)
}

// ReplyLoser is a proxy in front of a PostgreSQL server that loses the
// replies it is armed for (see PostgresLosingReplies).
type ReplyLoser interface {
	// LoseIf arms it: the next n requests trigger picks have their reply
	// lost (with then set: the reply of the next request after it on the
	// same connection that holds then).
	LoseIf(trigger func(request []byte) bool, then string, n int)
	// Lost is how many replies it lost.
	Lost() int
}

// PostgresLosingReplies is Postgres reached through a loopback proxy that
// loses replies: armed, it forwards a request and cuts the connection as
// the server's reply comes back, so the server has done the work (a
// write, committed) and the client hears only that its connection was
// lost.
func PostgresLosingReplies(t testing.TB) (string, ReplyLoser) {
	t.Helper()
	return pgtest.NewProxy(t, pgtest.Database(t))
}
