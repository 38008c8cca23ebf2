package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Opener opens a store from its address, as the user wrote it
// ("sqlite:.trellis/trellis.db", "postgres://host/db"), creating or
// migrating its database as needed.
type Opener func(ctx context.Context, addr string) (Store, error)

// Default is the address of the embedded default store, a SQLite file
// under the working directory.
const Default = "sqlite:.trellis/trellis.db"

var (
	registryMu sync.RWMutex
	openers    = map[string]Opener{}
)

// Register makes a store available to Open under an address scheme (the
// text before the address's first colon, or the whole address when it
// has none, as for "memory"). A store package calls it from its init
// function, so importing the package is what makes its scheme known.
// Registering a scheme twice, or an empty one, is a programmer error and
// panics.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if scheme == "" || strings.ContainsAny(scheme, ":/") || open == nil {
		panic(fmt.Sprintf("store: Register(%q): a scheme is a non-empty name without : or /, with an opener", scheme))
	}
	if _, dup := openers[scheme]; dup {
		panic(fmt.Sprintf("store: scheme %q registered twice", scheme))
	}
	openers[scheme] = open
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(openers))
}

// Open opens the store at addr with the opener registered for its scheme.
func Open(ctx context.Context, addr string) (Store, error) {
	scheme, _, _ := strings.Cut(addr, ":")
	registryMu.RLock()
	open, ok := openers[scheme]
	registryMu.RUnlock()
	if !ok {
		known := Schemes()
		return nil, fmt.Errorf("unknown store %q: the registered schemes are %s (a store's package registers its scheme when it is imported)",
			addr, strings.Join(known, ", "))
	}
	return open(ctx, addr)
}
