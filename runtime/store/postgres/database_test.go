package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/postgres"
)

// A database made by CreateDatabase is a new, empty one that a store
// opens and migrates; a second of the same name is an error; after
// DropDatabase, it is gone even with a store still connected to it.
func TestCreateAndDropDatabase(t *testing.T) {
	ctx := context.Background()
	server := pgtest.Database(t)
	addr, err := postgres.CreateDatabase(ctx, server, "made by-test")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(addr, "/made%20by-test") {
		t.Fatalf("the new database's address %s does not name it", addr)
	}
	st, err := postgres.Open(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Commit(ctx, &store.Checkpoint{Thread: "t", Seq: 1, Source: store.SourceCreate, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if threads, err := st.Threads(ctx, store.ThreadOptions{}); err != nil || len(threads) != 1 {
		t.Fatalf("the new database's threads: %v %v", threads, err)
	}
	if _, err := postgres.CreateDatabase(ctx, server, "made by-test"); err == nil || !strings.Contains(err.Error(), "made by-test") {
		t.Fatalf("creating a database that exists: %v", err)
	}
	if err := postgres.DropDatabase(ctx, server, "made by-test"); err != nil {
		t.Fatal(err)
	}
	if st, err := postgres.Open(ctx, addr); err == nil {
		st.Close()
		t.Fatal("a store opened a dropped database")
	}
}
