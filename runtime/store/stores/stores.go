// Package stores opens a checkpoint store from its address:
//
//	memory                      in-process, gone when the process ends
//	sqlite:PATH                 a SQLite file (the default: sqlite:.trellis/trellis.db)
//	postgres://... postgresql://...   a PostgreSQL database
package stores

import (
	"context"
	"fmt"
	"strings"

	"github.com/trellisflow/trellis/runtime/store"
	"github.com/trellisflow/trellis/runtime/store/memory"
	"github.com/trellisflow/trellis/runtime/store/postgres"
	"github.com/trellisflow/trellis/runtime/store/sqlite"
)

// Default is the store of `trellis run` and `trellis serve` when none is given.
const Default = "sqlite:.trellis/trellis.db"

// Open opens the store at addr, applying migrations to databases.
func Open(ctx context.Context, addr string) (store.Store, error) {
	switch {
	case addr == "memory":
		return memory.New(), nil
	case strings.HasPrefix(addr, "sqlite:"):
		return sqlite.Open(ctx, strings.TrimPrefix(addr, "sqlite:"))
	case strings.HasPrefix(addr, "postgres://"), strings.HasPrefix(addr, "postgresql://"):
		return postgres.Open(ctx, addr)
	}
	return nil, fmt.Errorf("unknown store %q: want memory, sqlite:PATH or postgres://...", addr)
}
