package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

// TestMain stops the PostgreSQL cluster the tests started, and fails
// them when a goroutine outlives them.
func TestMain(m *testing.M) { os.Exit(storetest.MainNoLeaks(m)) }

// open opens a store on a new database, closed when the test ends (the
// suites close it too: closing twice is closing).
func open(t *testing.T) *postgres.Store { return openURL(t, pgtest.Database(t)) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// Asked not to prepare statements on a direct connection (as it does not
// behind a pooler), the store keeps its promises the same.
func TestConformanceDescribingStatements(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openURL(t, pgtest.WithParam(pgtest.Database(t), "default_query_exec_mode", "cache_describe"))
	})
}

func TestMigrationsFromEmptyAndIdempotent(t *testing.T) {
	t.Run("direct", func(t *testing.T) { migrateTogether(t, pgtest.Database(t)) })
	t.Run("pgbouncer", func(t *testing.T) { migrateTogether(t, pgtest.PooledDatabase(t)) })
}

// migrateTogether opens four stores on an empty database at once: each
// migration is applied exactly once, and applying them again changes
// nothing.
func migrateTogether(t *testing.T, url string) {
	ctx := context.Background()
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 4)
	errs := make([]error, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = postgres.Open(ctx, url)
		}()
	}
	wg.Wait()
	for _, st := range stores {
		if st != nil {
			t.Cleanup(func() { st.Close() })
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
	}
	if err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := stores[1].Migrations(ctx)
	if err != nil || !reflect.DeepEqual(got, allMigrations(t)) {
		t.Fatalf("migrations %v %v", got, err)
	}
}

func TestTwoProcesses(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		url := pgtest.Database(t)
		return openURL(t, url), openURL(t, url)
	})
}

// Behind PgBouncer in transaction pooling mode, a store's transactions
// land on whichever server connection is free: the store must keep no
// state on the server between them.
func TestBehindPgBouncer(t *testing.T) {
	t.Run("conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return openURL(t, pgtest.PooledDatabase(t)) })
	})
	t.Run("two processes", func(t *testing.T) {
		storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
			url := pgtest.PooledDatabase(t)
			return openURL(t, url), openURL(t, url)
		})
	})
}

// The pooled test databases do multiplex: more clients than PgBouncer
// has server connections all run queries while connected at once, which
// session pooling could not serve; and a client that prepares named
// statements, as pgx does by default, soon finds its statement's name
// taken on a server connection another client prepared it on. The stores
// would fail the same way if they relied on any server-side session state.
func TestPgBouncerMultiplexes(t *testing.T) {
	ctx := context.Background()
	url := pgtest.PooledDatabase(t)
	clients := 3 * pgtest.PoolSize
	connect := func(mode pgx.QueryExecMode) *pgx.Conn {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = mode
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		return conn
	}
	pids := map[uint32]bool{}
	for range clients {
		var pid uint32
		if err := connect(pgx.QueryExecModeCacheDescribe).QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids[pid] = true
	}
	if len(pids) > pgtest.PoolSize {
		t.Fatalf("%d clients ran on %d server connections; PgBouncer opens at most %d", clients, len(pids), pgtest.PoolSize)
	}
	var failed error
	for range clients {
		var one int
		if err := connect(pgx.QueryExecModeCacheStatement).QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
			failed = err
		}
	}
	if failed == nil {
		t.Fatalf("%d clients preparing one named statement over %d server connections all succeeded", clients, pgtest.PoolSize)
	}
	t.Logf("named statements fail as expected: %v", failed)
}

func TestCatalogConformance(t *testing.T) {
	t.Run("direct", func(t *testing.T) { storetest.RunCatalog(t, func(t *testing.T) store.Store { return open(t) }) })
	t.Run("pgbouncer", func(t *testing.T) {
		storetest.RunCatalog(t, func(t *testing.T) store.Store { return openURL(t, pgtest.PooledDatabase(t)) })
	})
}

// listener listens on a channel and hands over what it hears.
func listener(t *testing.T, st *postgres.Store, dsn string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- st.Listen(ctx, dsn, "trellis test", func(p string) { heard <- p }, func(up bool) {
			if up {
				heard <- "<up>"
			} else {
				heard <- "<down>"
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v", err)
		}
	})
	return heard
}

func hear(t *testing.T, heard <-chan string, want string) {
	t.Helper()
	select {
	case got := <-heard:
		if got != want {
			t.Fatalf("heard %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%q never came", want)
	}
}

func TestNotify(t *testing.T) {
	ctx := context.Background()
	t.Run("direct", func(t *testing.T) {
		url := pgtest.Database(t)
		st := openURL(t, url)
		heard := listener(t, st, "")
		hear(t, heard, "<up>") // connected
		if err := st.Notify(ctx, "trellis test", "run r1"); err != nil {
			t.Fatal(err)
		}
		hear(t, heard, "run r1")
		// the listening connection is lost: it says so, comes back, says
		// so, and hears what is sent after
		admin, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
		hear(t, heard, "<down>")
		hear(t, heard, "<up>")
		if err := st.Notify(ctx, "trellis test", "run r2"); err != nil {
			t.Fatal(err)
		}
		hear(t, heard, "run r2")
	})
	t.Run("pgbouncer", func(t *testing.T) {
		// notifications are sent through PgBouncer in transaction mode
		// and heard on a direct connection
		pooled, direct := pgtest.Pooled(t)
		st := openURL(t, pooled)
		heard := listener(t, st, direct)
		hear(t, heard, "<up>")
		for i := range 5 {
			if err := st.Notify(ctx, "trellis test", fmt.Sprint("event ", i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			hear(t, heard, fmt.Sprint("event ", i))
		}
	})
	t.Run("bad address", func(t *testing.T) {
		st := openURL(t, pgtest.Database(t))
		if err := st.Listen(ctx, "postgres://%zz", "c", func(string) {}, func(bool) {}); err == nil || errors.Is(err, context.Canceled) {
			t.Fatalf("a malformed address: %v", err)
		}
	})
}

func openURL(t testing.TB, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// allMigrations is every migration's number, as the files in migrations/
// are numbered (numbers may be left for migrations of other branches).
func allMigrations(t *testing.T) []int {
	t.Helper()
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	out := make([]int, len(files))
	for i, f := range files {
		n, err := strconv.Atoi(strings.SplitN(filepath.Base(f), "_", 2)[0])
		if err != nil {
			t.Fatalf("migration %s: %v", f, err)
		}
		out[i] = n
	}
	return out
}

// Events send their notification in the transaction that records them
// (a checkpoint's, or their own): heard when they are recorded, not when
// they are refused.
func TestEventsNotifyInTheirTransaction(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	st := openURL(t, url)
	heard := listener(t, st, "")
	hear(t, heard, "<up>")
	if err := st.CreateThread(ctx, &store.ThreadRecord{ID: "t", Tenant: "acme", Flow: "f", Created: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, &store.RunRecord{ID: "r", Tenant: "acme", Thread: "t", Status: store.RunQueued, Created: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ClaimRun(ctx, "s1", "", time.Unix(2, 0)); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	for i, holder := range []string{"s2", "s1"} {
		seq := i + 1
		ea := &store.EventAppend{Run: "r", Holder: holder, Events: []store.EventRecord{{Seq: int64(seq), Data: []byte(`{}`)}},
			Channel: "trellis test", Payload: "run r by " + holder}
		cp := &store.Checkpoint{Thread: "t", Seq: uint64(seq + 1), Parent: uint64(seq), Run: "r", Step: seq, Source: store.SourceStep,
			Time: time.Unix(int64(seq+1), 0), Events: ea}
		if err := st.Commit(ctx, cp); err != nil || ea.Refused != (holder == "s2") {
			t.Fatalf("commit by %s: %v, refused %v", holder, err, ea.Refused)
		}
	}
	hear(t, heard, "run r by s1")
	// events alone: recorded and announced together, or neither
	for _, c := range []struct {
		holder string
		seq    int64
		want   error
	}{{"s2", 3, store.ErrRunChanged}, {"s1", 2, store.ErrExists}, {"s1", 3, nil}} {
		ea := &store.EventAppend{Run: "r", Holder: c.holder, Events: []store.EventRecord{{Seq: c.seq, Data: []byte(`{}`)}},
			Channel: "trellis test", Payload: fmt.Sprintf("run r %d by %s", c.seq, c.holder)}
		if err := st.AppendNotify(ctx, ea); !errors.Is(err, c.want) {
			t.Fatalf("events %d by %s: %v, want %v", c.seq, c.holder, err, c.want)
		}
	}
	hear(t, heard, "run r 3 by s1")
	if evs, err := st.Events(ctx, "r", 0, 0); err != nil || len(evs) != 2 {
		t.Fatalf("events %v %v, want 2", evs, err)
	}
}

// A run's end recorded with its last checkpoint sends its notes with the
// events' notification, in the commit's transaction (the events' own
// when the end has none of them to go with), and none when the end is
// not recorded.
func TestARunsEndNotifiesWithItsCommit(t *testing.T) {
	ctx := context.Background()
	st := openURL(t, pgtest.Database(t))
	heard := listener(t, st, "")
	hear(t, heard, "<up>")
	for i, c := range []struct {
		events, changed bool
		want            []string
	}{
		{events: true, want: []string{"run r0", "queue"}},
		{events: false, want: []string{"run r1", "queue"}},
		{events: true, changed: true, want: []string{"run r2"}},
	} {
		id, thread := fmt.Sprint("r", i), fmt.Sprint("t", i)
		if err := st.CreateThread(ctx, &store.ThreadRecord{ID: thread, Tenant: "acme", Flow: "f", Created: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateRun(ctx, &store.RunRecord{ID: id, Tenant: "acme", Thread: thread, Status: store.RunQueued, Created: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		rec, err := st.ClaimRun(ctx, "s1", "", time.Unix(2, 0))
		if err != nil || rec.ID != id {
			t.Fatalf("claim: %+v %v", rec, err)
		}
		if err := st.Commit(ctx, &store.Checkpoint{Thread: thread, Seq: 1, Source: store.SourceCreate, Time: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		expect := rec.State()
		if c.changed {
			asked := *rec
			asked.Stop = store.StopCancel
			if err := st.UpdateRun(ctx, &asked, expect, nil); err != nil {
				t.Fatal(err)
			}
		}
		ended := *rec
		ended.Status, ended.Checkpoint, ended.WriteID = store.RunSucceeded, 2, store.NewWriteID()
		ea := &store.EventAppend{Run: id, Holder: "s1", Channel: "trellis test", Payload: "run " + id,
			End: &store.RunEnd{Record: &ended, Expect: expect, Events: []store.EventRecord{{Seq: 2, Data: []byte(`{}`)}}, Notes: []string{"queue"}}}
		if c.events {
			ea.Events = []store.EventRecord{{Seq: 1, Data: []byte(`{}`)}}
		} else {
			ea.End.Events[0].Seq = 1
		}
		cp := &store.Checkpoint{Thread: thread, Seq: 2, Parent: 1, Run: id, Step: 1, Source: store.SourceStep, Time: time.Unix(2, 0),
			Events: ea, Release: "s1"}
		if err := st.Commit(ctx, cp); err != nil || ea.End.Applied == c.changed {
			t.Fatalf("%s: %v, applied %v", id, err, ea.End.Applied)
		}
		for _, w := range c.want {
			hear(t, heard, w)
		}
	}
	select {
	case got := <-heard:
		t.Fatalf("heard %q after the last end", got)
	case <-time.After(200 * time.Millisecond):
	}
}

// A quick pending write is read back as any other, and its transaction
// does not wait for the log to reach the disk: a hundred of them flush
// it far fewer times than a hundred written as PutPending writes them,
// as PostgreSQL counts its flushes (a connection's counts are its
// server process's, reported when it exits).
func TestQuickPendingWritesWaitForNoFlush(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DurableDatabase(t) // a server that flushes its log at each commit
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	syncs := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT wal_sync FROM pg_stat_wal`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// gone waits until the database's other connections have ended, and
	// with them their processes, which report their counts on exit
	gone := func() {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still open", n)
			}
		}
	}
	one := url + "&pool_max_conns=1"
	if !strings.Contains(url, "?") {
		one = url + "?pool_max_conns=1"
	}
	first, err := postgres.Open(ctx, one) // migrated, with the thread
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: time.Unix(1, 0), Next: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	first.Close()
	gone()
	const n = 100
	flushes := map[string]int64{}
	for _, way := range []string{"quick", "plain"} {
		before := syncs()
		st, err := postgres.Open(ctx, one)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			put := st.PutPending
			if way == "quick" {
				put = st.PutPendingQuick
			}
			if err := put(ctx, "t", 1, fmt.Sprintf("%s%d", way, i), []store.Write{{Field: "n", Value: int64(i)}}, ""); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
		gone()
		flushes[way] = syncs() - before
	}
	if flushes["plain"] < n || flushes["quick"] >= flushes["plain"]/2 {
		t.Fatalf("the log was flushed %d times for %d quick pending writes, %d times for %d plain ones", flushes["quick"], n, flushes["plain"], n)
	}
	st := openURL(t, url)
	h, err := st.Head(ctx, "t")
	if err != nil || len(h.Pending) != 2*n || len(h.Pending["quick7"]) != 1 || fmt.Sprint(h.Pending["quick7"][0].Value) != "7" {
		t.Fatalf("head: %d pending writes, quick7 %v, %v", len(h.Pending), h.Pending["quick7"], err)
	}
}
