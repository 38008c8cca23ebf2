package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// An API key is "trk_" + its id + "_" + its secret. The id is public (it
// names the key in lists and revocations); the store keeps only the
// SHA-256 of the whole key, so a leaked database holds no usable key. A
// key is random (160 bits of secret), so a fast hash is enough: there is
// nothing to guess that a slow hash would protect.
var keyFormat = regexp.MustCompile(`^trk_([a-z2-7]{12})_([a-z2-7]{32})$`)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomText(n int) string {
	b := make([]byte, n*5/8+1)
	_, _ = rand.Read(b)
	return strings.ToLower(b32.EncodeToString(b))[:n]
}

// HashKey is the stored form of a key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// CreateKey makes a key for tenant and records it in cat; the returned
// secret is the key, shown only now.
func CreateKey(ctx context.Context, cat store.Catalog, tenant, name string, admin bool) (*store.KeyRecord, string, error) {
	if !validTenant(tenant) {
		return nil, "", &api.Error{Code: api.CodeInvalidInput, Message: "a tenant is 1 to 64 letters, digits, '-', '_' or '.'"}
	}
	id := randomText(12)
	secret := "trk_" + id + "_" + randomText(32)
	k := &store.KeyRecord{ID: id, Hash: HashKey(secret), Tenant: tenant, Admin: admin, Name: name, Created: time.Now().UTC()}
	if err := cat.CreateKey(ctx, k); err != nil {
		return nil, "", err
	}
	return k, secret, nil
}

var tenantFormat = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func validTenant(t string) bool { return tenantFormat.MatchString(t) }

var errUnauthorized = &api.Error{Code: api.CodeUnauthorized, Message: "send a valid API key: Authorization: Bearer trk_..."}

// bearer is the token of a request's Authorization header when its
// scheme is Bearer, in any case (RFC 9110: schemes are case-insensitive).
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// authenticate finds the caller's key.
func (s *Server) authenticate(r *http.Request) (*caller, error) {
	token, ok := bearer(r)
	if ok && strings.HasPrefix(token, grantPrefix) {
		// a voice agent's grant, checked against its session in the store
		return s.checkGrant(r.Context(), token, time.Now())
	}
	if !ok || !keyFormat.MatchString(token) {
		return nil, errUnauthorized
	}
	k, err := s.cat.KeyByHash(r.Context(), HashKey(token))
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, errUnauthorized
		}
		return nil, &api.Error{Code: api.CodeUnavailable, Message: "cannot check the key: the store does not answer"}
	}
	if !k.Revoked.IsZero() {
		return nil, &api.Error{Code: api.CodeUnauthorized, Message: "this key was revoked"}
	}
	if !k.Expires.IsZero() && !time.Now().Before(k.Expires) {
		return nil, &api.Error{Code: api.CodeUnauthorized, Message: "this key has expired"}
	}
	return &caller{key: k, tenant: k.Tenant}, nil
}

// admin reports whether the caller may use the admin routes: an admin
// key of no narrower scope.
func (c *caller) admin() bool { return c.key != nil && c.key.Admin && c.key.Scope == "" }

// edits reports whether the caller may change the flows (save them,
// reload them): an admin, or a studio's page.
func (c *caller) edits() bool { return c.admin() || c.key != nil && c.key.Scope == store.ScopeStudio }

func keyInfo(k *store.KeyRecord) api.Key {
	out := api.Key{ID: k.ID, Tenant: k.Tenant, Name: k.Name, Admin: k.Admin, Scope: k.Scope, Created: k.Created}
	if !k.Revoked.IsZero() {
		t := k.Revoked
		out.Revoked = &t
	}
	if !k.Expires.IsZero() {
		t := k.Expires
		out.Expires = &t
	}
	return out
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request, _ *caller) error {
	var in api.CreateKey
	if err := readJSON(r, &in); err != nil {
		return err
	}
	k, secret, err := CreateKey(r.Context(), s.cat, in.Tenant, in.Name, in.Admin)
	if err != nil {
		return err
	}
	out := keyInfo(k)
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, _ *caller) error {
	keys, err := s.cat.Keys(r.Context(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	out := api.KeyList{Keys: []api.Key{}}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyInfo(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, c *caller) error {
	id := r.PathValue("key")
	if id == c.key.ID {
		return &api.Error{Code: api.CodeInvalidInput, Message: "a key cannot revoke itself"}
	}
	if err := s.cat.RevokeKey(r.Context(), id, time.Now().UTC()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no key %q", id)}
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
