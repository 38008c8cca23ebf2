package api

import (
	"context"
	"net/http"
)

// The codes of a request's own terms: how long its body may take, and
// its idempotency key.
const (
	// CodeRequestTimeout: the request's body did not arrive within the
	// server's body deadline (408; nothing was done).
	CodeRequestTimeout Code = "request_timeout"
	// CodeIdempotencyKeyReused: the idempotency key was first used with
	// another request (another route or body) (422).
	CodeIdempotencyKeyReused Code = "idempotency_key_reused"
	// CodeIdempotencyKeyInUse: the first request with the idempotency
	// key is still being handled (409; retry after Retry-After).
	CodeIdempotencyKeyInUse Code = "idempotency_key_in_use"
)

var requestStatus = map[Code]int{
	CodeRequestTimeout:       http.StatusRequestTimeout,
	CodeIdempotencyKeyReused: http.StatusUnprocessableEntity,
	CodeIdempotencyKeyInUse:  http.StatusConflict,
}

// Idempotency keys. A creating request (a thread, a fork, a correction,
// a run, a schedule, a memory document) sent with the header
// Idempotency-Key is done once for a key: sent again with the same key
// and body within a day (a client retrying after a lost answer, to any
// server sharing the store) it is answered as it was the first time
// (IdempotentReplayedHeader says so), and a run started with a key
// that has not ended yet is followed, not started again. The same key
// with another route or body is refused (CodeIdempotencyKeyReused).
const (
	IdempotencyKeyHeader     = "Idempotency-Key"
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// MaxIdempotencyKey is the longest key (of visible ASCII characters).
	MaxIdempotencyKey = 255
)

type idempotencyKey struct{}

// WithIdempotencyKey is ctx with an idempotency key that the client's
// creating calls made with it send: the same key on a call made again
// (after a lost answer, a timeout, a server that died) makes it once.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, key)
}

// IdempotencyKey is the key ctx carries ("" for none).
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKey{}).(string)
	return k
}
