package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/trellisflow/trellis/runtime/store"
	_ "github.com/trellisflow/trellis/runtime/store/all"
	"github.com/trellisflow/trellis/runtime/store/internal/pgtest"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
)

// A store from outside the module registers its scheme and opens through
// store.Open like the built-in ones.
func TestRegisterAStoreOfYourOwn(t *testing.T) {
	if slices.Contains(store.Schemes(), "testmem") {
		t.Fatal("the scheme is registered before the test registers it: a run before this one left it")
	}
	var got string
	store.Register("testmem", func(_ context.Context, addr string) (store.Store, error) {
		got = addr
		return memory.New(), nil
	})
	// the registry as the test found it, for the next run in this process
	t.Cleanup(func() { store.Unregister("testmem") })
	st, err := store.Open(context.Background(), "testmem:anything/at all")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got != "testmem:anything/at all" {
		t.Fatalf("the opener got %q, not the whole address", got)
	}
	for _, bad := range []func(){
		func() {
			store.Register("testmem", func(context.Context, string) (store.Store, error) { return nil, nil })
		},
		func() { store.Register("", func(context.Context, string) (store.Store, error) { return nil, nil }) },
		func() { store.Register("a:b", func(context.Context, string) (store.Store, error) { return nil, nil }) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a duplicate or malformed registration did not panic")
				}
			}()
			bad()
		}()
	}
}

func TestOpenByScheme(t *testing.T) {
	ctx := context.Background()
	_, err := store.Open(ctx, "redis://localhost")
	if err == nil || !strings.Contains(err.Error(), "memory, postgres, postgresql, sqlite") {
		t.Fatalf("an unknown scheme's error names the registered ones: %v", err)
	}
	if _, err := store.Open(ctx, "memory:x"); err == nil {
		t.Fatal("memory takes no path")
	}
	st, err := store.Open(ctx, "sqlite:"+t.TempDir()+"/x.db")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*sqlite.Store); !ok {
		t.Fatalf("sqlite: opened a %T", st)
	}
	st.Close()
	url := pgtest.Database(t)
	for _, addr := range []string{url, "postgresql" + strings.TrimPrefix(url, "postgres")} {
		st, err := store.Open(ctx, addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if _, ok := st.(*postgres.Store); !ok {
			t.Fatalf("postgres: opened a %T", st)
		}
		st.Close()
	}
}
