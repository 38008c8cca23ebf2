package postgres_test

import (
	"context"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/postgres/pgtest"
	"github.com/trellisflow/trellis/runtime/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t *testing.T) *postgres.Store {
	st, err := postgres.Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func TestMigrationsFromEmptyAndIdempotent(t *testing.T) {
	url := pgtest.Database(t)
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
	for i, err := range errs {
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	if err := stores[0].Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := stores[1].Migrations(ctx)
	if err != nil || !reflect.DeepEqual(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("migrations %v %v", got, err)
	}
}

func TestTwoProcesses(t *testing.T) {
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		url := pgtest.Database(t)
		a, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		b, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	})
}
