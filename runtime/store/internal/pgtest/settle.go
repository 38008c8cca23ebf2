package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// settleWait bounds how long a closed pool's connections take to leave
// the server (each backend ends when it reads its client's goodbye). It
// is a deadline against a hang, not the verdict: the verdict is the
// server's own list of connections.
const settleWait = 30 * time.Second

// release is what Database's cleanup does once the test's own cleanups
// have run (they were registered after it, so they run before it): the
// test has closed everything it opened on the database. PgBouncer is
// asked whether a client of the test is still connected to it, then
// drops its idle server connections to the database (they would
// otherwise stay open for minutes, and a package run a few times would
// run the server out of connection slots); then the server's
// pg_stat_activity must show no connection left to the database. A
// leak fails the test that made it, naming each connection. The
// database is dropped either way (beside the tests that go on), so that
// what the test left neither fills the disk nor holds slots when the
// tests run again in the same process.
func release(t testing.TB, admin, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*settleWait)
	defer cancel()
	if console := bouncerConsole(admin); console != "" {
		if n, err := bouncerClients(ctx, console, name); err != nil {
			t.Errorf("pgbouncer: %v", err)
		} else if n > 0 {
			t.Errorf("postgres: the test left %d client connection(s) to database %s open through PgBouncer: close every store, pool and connection it opens (t.Cleanup)", n, name)
		}
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Errorf("postgres: connect: %v", err)
		return
	}
	defer conn.Close(ctx)
	if left, err := settled(ctx, conn, `datname = $1`, name); err != nil {
		t.Errorf("postgres: %v", err)
	} else if len(left) > 0 {
		t.Errorf("postgres: the test left %d connection(s) to database %s open after it ended; close every store, pool and connection it opens (t.Cleanup):\n\t%s",
			len(left), name, strings.Join(left, "\n\t"))
	}
	dropLater(admin, name)
}

// The databases of ended tests are dropped by one goroutine beside the
// tests that go on, so that a test does not wait for its database's
// files to go; Main waits for it before it stops the cluster.
var (
	dropMu   sync.Mutex
	dropping chan [2]string // admin URL, database
	dropped  chan struct{}
	dropErrs []string
)

func dropLater(admin, name string) {
	dropMu.Lock()
	defer dropMu.Unlock()
	if dropping == nil {
		dropping, dropped = make(chan [2]string, 1024), make(chan struct{})
		go dropAll(dropping, dropped)
	}
	dropping <- [2]string{admin, name}
}

func dropAll(in <-chan [2]string, done chan<- struct{}) {
	defer close(done)
	for d := range in {
		ctx, cancel := context.WithTimeout(context.Background(), 2*settleWait)
		conn, err := pgx.Connect(ctx, d[0])
		if err == nil {
			_, err = conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{d[1]}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
		}
		cancel()
		if err != nil {
			dropMu.Lock()
			dropErrs = append(dropErrs, fmt.Sprintf("drop database %s: %v", d[1], err))
			dropMu.Unlock()
		}
	}
}

// dropsDone waits until the databases of ended tests are dropped, and
// returns the errors of those that could not be.
func dropsDone() []string {
	dropMu.Lock()
	in, done := dropping, dropped
	dropping, dropped = nil, nil
	dropMu.Unlock()
	if in != nil {
		close(in)
		<-done
	}
	dropMu.Lock()
	defer dropMu.Unlock()
	errs := dropErrs
	dropErrs = nil
	return errs
}

// settled waits until no connection the condition picks (with $1 its
// argument) is left in pg_stat_activity, but the caller's own, and
// returns those still there at the deadline, described.
func settled(ctx context.Context, conn *pgx.Conn, cond string, arg any) ([]string, error) {
	deadline := time.Now().Add(settleWait)
	for {
		rows, err := conn.Query(ctx, `SELECT format('pid %s, database %s, application %L, from %s, %s since %s: %s',
				pid, datname, application_name, coalesce(client_addr::text, 'a local socket'), coalesce(state, ''),
				backend_start, left(query, 200))
			FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND `+cond, arg)
		if err != nil {
			return nil, err
		}
		left, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(left) == 0 || time.Now().After(deadline) {
			return left, err
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return left, nil
		}
	}
}

// bouncerConsole is the address of the admin console of the PgBouncer
// in front of the server of admin, if one runs.
func bouncerConsole(admin string) string {
	mu.Lock()
	addr, ok := bouncer.addr, bouncer.started && bouncer.err == nil
	mu.Unlock()
	if !ok {
		return ""
	}
	u, err := url.Parse(admin)
	if err != nil {
		return ""
	}
	u.Host, u.Path, u.RawQuery = addr, "/pgbouncer", "sslmode=disable&default_query_exec_mode=simple_protocol"
	return u.String()
}

// bouncerClients counts PgBouncer's clients connected to database db,
// then closes its server connections to db (KILL).
func bouncerClients(ctx context.Context, console, db string) (int, error) {
	conn, err := pgx.Connect(ctx, console)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW CLIENTS")
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return 0, err
		}
		for i, f := range rows.FieldDescriptions() {
			if f.Name == "database" && fmt.Sprint(vals[i]) == db {
				n++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// a database no client reached through PgBouncer has no pool there
	if _, err := conn.Exec(ctx, "KILL "+db); err != nil && !strings.Contains(err.Error(), "no such database") {
		return n, err
	}
	return n, nil
}
