package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
)

// fill writes n threads of a few checkpoints with large values.
func fill(t *testing.T, st store.Store, n int) {
	t.Helper()
	big := strings.Repeat("room ", 2000)
	for i := range n {
		id := fmt.Sprint("t", i)
		if err := st.Commit(context.Background(), &store.Checkpoint{Thread: id, Seq: 1, Source: store.SourceCreate,
			Writes: []store.Write{{Field: "text", Version: 1, Value: big}}}); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// checkpointAll copies the whole write-ahead log into the database file
// and empties it, as SQLite reports it did: a checkpoint that found a
// reader or another checkpoint in its way (busy) is tried again.
func checkpointAll(t *testing.T, db *sql.DB) {
	t.Helper()
	for try := 0; ; try++ {
		var busy, logged, copied int
		if err := db.QueryRow(`PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logged, &copied); err != nil {
			t.Fatal(err)
		}
		if busy == 0 && logged == copied {
			return
		}
		if try == 1000 {
			t.Fatalf("the checkpoint was busy %d times (last: %d of %d frames copied)", try+1, copied, logged)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A new database returns the room deleted threads leave, a batch of
// pages at a time, and its file shrinks.
func TestReturnSpace(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fill(t, st, 200)
	for i := range 200 {
		if err := st.Delete(ctx, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	db := openDB(t, path)
	defer db.Close()
	checkpointAll(t, db)
	full := fileSize(t, path)
	total, batches := 0, 0
	for {
		n, left, err := st.ReturnSpace(ctx, 64)
		if err != nil {
			t.Fatal(err)
		}
		if n > 64 {
			t.Fatalf("returned %d pages in a batch of 64", n)
		}
		total += n
		batches++
		if left == 0 {
			break
		}
		if n == 0 || batches > 1000 {
			t.Fatalf("free pages left: %d after %d batches", left, batches)
		}
	}
	checkpointAll(t, db)
	if total < 200 || batches < 3 {
		t.Fatalf("returned %d pages in %d batches", total, batches)
	}
	if after := fileSize(t, path); after > full-int64(total)*4096/2 {
		t.Fatalf("the file is %d bytes after returning %d pages, %d before", after, total, full)
	}
}

// A database made before incremental mode returns nothing until Vacuum
// converts it, then returns its free pages.
func TestVacuumConvertsAnOldFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db := openDB(t, path)
	if _, err := db.Exec(`PRAGMA auto_vacuum = NONE; CREATE TABLE early (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fill(t, st, 50)
	for i := range 50 {
		if err := st.Delete(ctx, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, left, err := st.ReturnSpace(ctx, 64); err != nil || n != 0 || left == 0 {
		t.Fatalf("an old file returned %d pages (%d left): %v", n, left, err)
	}
	if err := st.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	fill(t, st, 50)
	for i := range 50 {
		if err := st.Delete(ctx, fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, err := st.ReturnSpace(ctx, 64); err != nil || n == 0 {
		t.Fatalf("a converted file returned %d pages: %v", n, err)
	}
}
