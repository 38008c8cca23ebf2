package store

import (
	"context"
	"time"
)

// Requests keeps the idempotency keys of the API's creating requests (a
// client's Idempotency-Key header): the first request with a key is
// recorded with a fingerprint of what it asked, the id of what it
// creates (Ref) and, once it is answered, its answer, so that the same
// request sent again (a client retrying after a lost answer, through any
// server sharing the store) is answered the same and creates nothing
// twice. A key is a tenant's, and lives until Expiry has passed since
// its first request; PruneRequests deletes those older. The built-in
// stores implement it, and storetest.RunRequests is its conformance
// suite.
//
// A request's record names the thread it is about (Thread, a store key;
// "" for none): it is deleted with the thread, since its answer may hold
// the thread's state.
type Requests interface {
	// ReserveRequest records r as the first request with its key, unless
	// the key has a record made at or after notBefore (one made before
	// it has expired, and is replaced): it returns the record the key
	// has then, and whether it is r.
	ReserveRequest(ctx context.Context, r *RequestRecord, notBefore time.Time) (kept *RequestRecord, fresh bool, err error)
	// TakeRequest passes an unanswered key's request on to owner until
	// until, if it is still owned by from: ErrClaimLost when another took
	// it or answered it first, ErrNotFound when the key has no record.
	TakeRequest(ctx context.Context, tenant, key, from, owner string, until time.Time) error
	// AnswerRequest records the answer of a key's request, if it has
	// none (the first answer stays), with the thread it is about when
	// thread is not "" (a thread the request made). ErrNotFound when the
	// key has no record.
	AnswerRequest(ctx context.Context, tenant, key, thread string, status int, body []byte) error
	// ReleaseRequest deletes the record of a key's request that created
	// nothing, if owner still owns it and it has no answer, so that the
	// request sent again is handled anew.
	ReleaseRequest(ctx context.Context, tenant, key, owner string) error
	// PruneRequests deletes at most limit records made before before
	// and returns how many it deleted.
	PruneRequests(ctx context.Context, before time.Time, limit int) (int, error)
}

// RequestExpiry is how long an idempotency key holds: a request sent
// again within it is answered as the first was.
const RequestExpiry = 24 * time.Hour

// RequestRecord is the first request sent with an idempotency key.
type RequestRecord struct {
	Tenant, Key string
	// Fingerprint identifies what was asked: the method, the path and
	// the body.
	Fingerprint string
	// Ref is the id of what the request creates (a run's id), chosen
	// with the key's first request so that every retry creates it under
	// the same id; Thread is the thread it is about (a store key, "" for
	// none).
	Ref, Thread string
	// Owner handles the request until Locked, unless it is answered
	// first; after that another may take it over (TakeRequest).
	Owner  string
	Locked time.Time
	// Status and Body are its answer (Status 0: none yet).
	Status  int
	Body    []byte
	Created time.Time
}

// RequestsOf returns st's Requests.
func RequestsOf(st Store) (Requests, bool) {
	r, ok := st.(Requests)
	return r, ok
}
