package sqlite_test

import (
	"context"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "trellis.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

func TestMigrationsIdempotentAndConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	stores := make([]*sqlite.Store, 4)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = sqlite.Open(ctx, path)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := stores[0].Migrations(ctx)
	if err != nil || !reflect.DeepEqual(got, []int{1, 2}) {
		t.Fatalf("migrations %v %v", got, err)
	}
}

func TestTwoProcesses(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "shared.db")
		a, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	})
}
