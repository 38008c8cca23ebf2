package postgres

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
)

// A store reaching its server directly (over TCP, or the server's Unix
// socket) prepares its statements once per connection; through
// PgBouncer in transaction mode, which would hand a connection's
// prepared statements to other clients' sessions, it prepares none; and
// default_query_exec_mode in the URL, when given, is what it does.
func TestStatementsPreparedOnlyOnADirectConnection(t *testing.T) {
	ctx := context.Background()
	// one connection: the statements' session is the one counted
	direct := pgtest.WithParam(pgtest.Database(t), "pool_max_conns", "1")
	cases := []struct {
		name     string
		url      string
		prepared bool
	}{
		{"direct", direct, true},
		{"direct, by a host name", withHost(t, direct, "localhost"), true},
		// pgx tries TLS first, then a fallback without it, to the same host
		{"direct, sslmode unsaid (prefer)", withoutParam(t, direct, "sslmode"), true},
		{"direct, sslmode allow", pgtest.WithParam(direct, "sslmode", "allow"), true},
		{"two hosts", withSecondHost(t, direct, "localhost"), false},
		{"direct, asked not to", pgtest.WithParam(direct, "default_query_exec_mode", "cache_describe"), false},
		{"direct, asked to", pgtest.WithParam(direct, "default_query_exec_mode", "cache_statement"), true},
		{"direct, asked to plan each time", pgtest.WithParam(direct, "plan_cache_mode", "auto"), true},
		{"pgbouncer", pgtest.WithParam(pgtest.PooledDatabase(t), "pool_max_conns", "1"), false},
	}
	var dir string
	if err := openStore(t, direct).pool.QueryRow(ctx, `SELECT current_setting('unix_socket_directories')`).Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".s.PGSQL."+mustURL(t, direct).Port())); err == nil {
		cases = append(cases, struct {
			name     string
			url      string
			prepared bool
		}{"direct, by its Unix socket", withSocket(t, direct, dir), true})
	} else if os.Getenv("TRELLIS_TEST_DATABASE_URL") == "" {
		t.Fatalf("the test server's socket: %v", err)
	}
	for k, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			thread := fmt.Sprint("t", k) // the cases share a database
			s := openStore(t, tc.url)
			want := pgx.QueryExecModeCacheDescribe
			if tc.prepared {
				want = pgx.QueryExecModeCacheStatement
			}
			if got := s.pool.Config().ConnConfig.DefaultQueryExecMode; got != want {
				t.Fatalf("the store runs its statements in mode %v, want %v", got, want)
			}
			for i := range 3 {
				cp := &store.Checkpoint{Thread: thread, Seq: uint64(i + 1), Parent: uint64(i), Run: "r", Source: store.SourceStep, Time: time.Now(),
					Writes: []store.Write{{Field: "n", Version: uint64(i + 1), Value: i}}}
				if err := s.Commit(ctx, cp); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Head(ctx, thread); err != nil {
				t.Fatal(err)
			}
			if tc.name == "pgbouncer" {
				return // its sessions are the pooler's, not the store's
			}
			var n int
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if (n > 0) != tc.prepared {
				t.Errorf("statements prepared: want %v; the connection holds %d", tc.prepared, n)
			}
			// prepared, each is planned once, unless the URL says otherwise
			wantPlans := "auto"
			if tc.prepared && !strings.Contains(tc.url, "plan_cache_mode") {
				wantPlans = "force_generic_plan"
			}
			var plans string
			if err := s.pool.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&plans); err != nil {
				t.Fatal(err)
			}
			if plans != wantPlans {
				t.Errorf("plan_cache_mode %s, want %s", plans, wantPlans)
			}
		})
	}
}

func mustURL(t *testing.T, addr string) *url.URL {
	t.Helper()
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// withHost is addr with its host name replaced.
func withHost(t *testing.T, addr, host string) string {
	u := mustURL(t, addr)
	u.Host = host + ":" + u.Port()
	return u.String()
}

// withSocket is addr through the server's Unix socket in dir.
func withSocket(t *testing.T, addr, dir string) string {
	u := mustURL(t, addr)
	port := u.Port()
	u.Host = ""
	return pgtest.WithParam(pgtest.WithParam(u.String(), "host", dir), "port", fmt.Sprint(port))
}

// withoutParam is addr without its query parameter name.
func withoutParam(t *testing.T, addr, name string) string {
	u := mustURL(t, addr)
	q := u.Query()
	q.Del(name)
	u.RawQuery = q.Encode()
	return u.String()
}

// withSecondHost is addr naming host, at the same port, after its own.
func withSecondHost(t *testing.T, addr, host string) string {
	u := mustURL(t, addr)
	u.Host += "," + host + ":" + u.Port()
	return u.String()
}

// A URL that asks for prepared statements through PgBouncer gets them
// (PgBouncer 1.21 on keeps them per client), and no plan_cache_mode:
// PgBouncer refuses a session that starts with a parameter it does not
// know.
func TestAPoolerIsSentNoPlanMode(t *testing.T) {
	ctx := context.Background()
	addr := pgtest.WithParam(pgtest.PooledDatabase(t), "default_query_exec_mode", "cache_statement")
	cfg, err := config(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.ConnConfig.DefaultQueryExecMode; got != pgx.QueryExecModeCacheStatement {
		t.Fatalf("the store runs its statements in mode %v, as asked: want %v", got, pgx.QueryExecModeCacheStatement)
	}
	if mode, ok := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; ok {
		t.Errorf("plan_cache_mode %s sent through a pooler", mode)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		t.Fatalf("a session through PgBouncer: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT 1`, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
}
