package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trellisflow/trellis/runtime/store"
)

// Keys made outside the store: a deployment keeps an admin key in its
// secrets (a Kubernetes Secret) and the servers register it, so that the
// key is never printed, logged or passed on a command line.

// ErrKeyTaken: an imported key's id names another key in the store.
var ErrKeyTaken = errors.New("a different key with this id is in the store")

// NewKey returns a new key's text (trk_ID_SECRET), recorded nowhere:
// ImportKey records it.
func NewKey() string { return "trk_" + randomText(12) + "_" + randomText(32) }

// ImportKey records key (a key's text, as NewKey makes it) for tenant,
// unless the store has it already (revoked or not: a revoked key stays
// revoked), and reports whether it recorded it. A key whose id names
// another key is ErrKeyTaken.
func ImportKey(ctx context.Context, cat store.Catalog, tenant, name string, admin bool, key string) (bool, error) {
	if !validTenant(tenant) {
		return false, fmt.Errorf("a tenant is 1 to 64 letters, digits, '-', '_' or '.': %q", tenant)
	}
	m := keyFormat.FindStringSubmatch(key)
	if m == nil {
		return false, errors.New("not a key: a key is trk_, 12 and 32 of a-z and 2-7 (trellis keys generate makes one)")
	}
	if k, err := cat.KeyByHash(ctx, HashKey(key)); err == nil {
		if k.Tenant != tenant || k.Admin != admin {
			return false, fmt.Errorf("the key %s is in the store already, for tenant %s (admin %v)", k.ID, k.Tenant, k.Admin)
		}
		return false, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	err := cat.CreateKey(ctx, &store.KeyRecord{ID: m[1], Hash: HashKey(key), Tenant: tenant, Admin: admin, Name: name, Created: time.Now().UTC()})
	if errors.Is(err, store.ErrExists) {
		// made by another server at the same time, or another key's id
		if k, err := cat.KeyByHash(ctx, HashKey(key)); err == nil && k.Tenant == tenant && k.Admin == admin {
			return false, nil
		}
		return false, fmt.Errorf("key %s: %w", m[1], ErrKeyTaken)
	}
	return err == nil, err
}
