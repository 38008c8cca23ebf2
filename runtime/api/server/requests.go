package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// A request's own terms: how long its body may take to arrive (a body
// that stalls is answered 408 request_timeout once BodyTimeout has
// passed, not held until the connection dies), and its idempotency key
// (Idempotency-Key, as Stripe's): a creating request sent again with
// the same key and body is answered as the first was, and creates
// nothing twice.

// idempotence is what a route does with an idempotency key.
type idempotence int

const (
	// notKeyed: the route takes no key (one sent is ignored: the route
	// creates nothing, or is idempotent by itself).
	notKeyed idempotence = iota
	// keyedAnswer: the route's first answer is kept and replayed; while
	// the first request is handled, the same one is refused
	// (idempotency_key_in_use) until its lock lapses.
	keyedAnswer
	// keyedRun: a run's start. The run is made under the key's ref, so a
	// request sent again follows the run it started (its wait, its
	// stream), or starts it under that id if it never was.
	keyedRun
	// refusesKey: a creating route whose answer is never kept (a new
	// API key's secret is shown once): a key is refused.
	refusesKey
)

// requestLock is how long the first request with a key holds it: a
// request with the same key meanwhile is refused (idempotency_key_in_use),
// and after it, one whose first request died takes it over.
const requestLock = 30 * time.Second

// maxKeptAnswer is the largest answer kept for a key; a larger one is
// not kept (a run's is found again by its ref).
const maxKeptAnswer = 1 << 20

// keyed is the idempotency key of the request under way, handed to its
// route: ref names what it creates; the route says when it created it
// (made) and the thread it made.
type keyed struct {
	ref string
	// owner is this request's name on the key's record ("" when it
	// follows another request's run).
	owner string
	// retry: the key's first request was another one (this one follows
	// its run, or takes it over).
	retry bool
	mu    sync.Mutex
	made  bool
	// followed: what the key stands for was made by its first request,
	// and this one follows it (its answer says it is a replay)
	followed bool
	thread   string
}

type keyedCtx struct{}

func keyedOf(r *http.Request) *keyed {
	k, _ := r.Context().Value(keyedCtx{}).(*keyed)
	return k
}

// newRef is the id a creating route gives what it makes when the
// caller named none: the key's ref, for a request with an idempotency
// key (the same on every retry), else a new id.
func newRef(r *http.Request, prefix string) string {
	if k := keyedOf(r); k != nil {
		return prefix + "_" + k.ref
	}
	return newID(prefix)
}

// made records that the request created what its key stands for (on
// thread, a store key, or "" for none).
func made(r *http.Request, thread string) {
	if k := keyedOf(r); k != nil {
		k.mu.Lock()
		k.made = true
		if thread != "" {
			k.thread = thread
		}
		k.mu.Unlock()
	}
}

// followed records that the request follows what its key's first
// request made (on thread), rather than making it.
func followed(r *http.Request, thread string) {
	made(r, thread)
	if k := keyedOf(r); k != nil {
		k.mu.Lock()
		k.followed = true
		k.mu.Unlock()
	}
}

// checkIdempotencyKey checks a key's form: 1 to 255 visible ASCII
// characters.
func checkIdempotencyKey(key string) error {
	bad := len(key) == 0 || len(key) > api.MaxIdempotencyKey
	for i := 0; i < len(key) && !bad; i++ {
		bad = key[i] < 0x21 || key[i] > 0x7e
	}
	if bad {
		return &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("the header %s is 1 to %d visible ASCII characters (a UUID, say)", api.IdempotencyKeyHeader, api.MaxIdempotencyKey),
			Details: map[string]string{"parameter": api.IdempotencyKeyHeader}}
	}
	return nil
}

// fingerprint identifies what a request asks: its method, path, query
// and body, a JSON body by its meaning (the same members in another
// order or spacing are the same request).
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", r.Method, r.URL.Path, r.URL.RawQuery)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil && !dec.More() {
		if canon, err := json.Marshal(v); err == nil {
			body = canon
		}
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// keyedRequest handles a request that carries an idempotency key on a
// route that takes one: a key seen before (within its expiry) with the
// same request is answered as the first request was, or follows it; a
// new one runs the route under the key, keeps its answer, and releases
// the key when the route created nothing (so that the request sent again
// is handled anew).
func (s *Server) keyedRequest(w http.ResponseWriter, r *http.Request, c *caller, rt route, key string, fail func(error)) {
	if rt.idempotence == refusesKey {
		fail(&api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("this route's answer is shown once: it takes no %s", api.IdempotencyKeyHeader)})
		return
	}
	if err := checkIdempotencyKey(key); err != nil {
		fail(err)
		return
	}
	rq, ok := store.RequestsOf(s.eng().Store)
	if !ok {
		fail(&api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("this server's store keeps no idempotency keys: send the request without %s", api.IdempotencyKeyHeader)})
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		fail(err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	ctx := context.WithoutCancel(r.Context())
	now := time.Now().UTC()
	rec := &store.RequestRecord{Tenant: c.tenant, Key: key, Fingerprint: fingerprint(r, body), Ref: newID("k")[2:], Owner: newID("req"),
		Locked: now.Add(requestLock), Created: now}
	if id := r.PathValue("id"); id != "" && checkThreadID(id) == nil {
		rec.Thread = threadKey(c, id)
	}
	kept, fresh, err := rq.ReserveRequest(ctx, rec, now.Add(-store.RequestExpiry))
	if err != nil {
		fail(err)
		return
	}
	k := &keyed{ref: kept.Ref, owner: rec.Owner}
	if !fresh {
		switch {
		case kept.Fingerprint != rec.Fingerprint:
			fail(&api.Error{Code: api.CodeIdempotencyKeyReused,
				Message: fmt.Sprintf("this %s was first sent with another request (another route or body): a key makes one request; use a new key for another", api.IdempotencyKeyHeader)})
			return
		case kept.Status != 0:
			replay(w, kept)
			return
		case rt.idempotence == keyedRun:
			// follow the run the first request started, or start it
			// under the key's ref if it never was
			k.owner, k.retry = "", true
		case kept.Locked.After(now):
			w.Header().Set("Retry-After", strconv.Itoa(max(1, int(time.Until(kept.Locked).Seconds()+0.5))))
			fail(&api.Error{Code: api.CodeIdempotencyKeyInUse, Message: fmt.Sprintf("the first request with this %s is still being handled: retry later", api.IdempotencyKeyHeader)})
			return
		default:
			// its first request died before its answer: this one
			// takes it over
			err := rq.TakeRequest(ctx, c.tenant, key, kept.Owner, rec.Owner, now.Add(requestLock))
			if errors.Is(err, store.ErrClaimLost) || errors.Is(err, store.ErrNotFound) {
				w.Header().Set("Retry-After", "1")
				fail(&api.Error{Code: api.CodeIdempotencyKeyInUse, Message: fmt.Sprintf("another request with this %s is being handled: retry later", api.IdempotencyKeyHeader)})
				return
			}
			if err != nil {
				fail(err)
				return
			}
			k.retry = true
		}
	}
	tee := &answerWriter{ResponseWriter: w, keep: !rt.stream, key: k}
	r = r.WithContext(context.WithValue(r.Context(), keyedCtx{}, k))
	if err := rt.handle(tee, r, c); err != nil {
		fail(err)
	}
	k.mu.Lock()
	madeIt, thread := k.made, k.thread
	k.mu.Unlock()
	switch {
	case madeIt && tee.keep && tee.status >= 200 && tee.status < 300:
		if err := rq.AnswerRequest(ctx, c.tenant, key, thread, tee.status, tee.body.Bytes()); err != nil {
			s.log.Warn("keeping a request's answer for its idempotency key", "error", err.Error())
		}
	case !madeIt && k.owner != "":
		// nothing was made: the same request sent again is handled anew
		if err := rq.ReleaseRequest(ctx, c.tenant, key, k.owner); err != nil {
			s.log.Warn("releasing an idempotency key", "error", err.Error())
		}
	}
}

// replay answers a request with the answer kept for its key.
func replay(w http.ResponseWriter, kept *store.RequestRecord) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(api.IdempotentReplayedHeader, "true")
	w.WriteHeader(kept.Status)
	_, _ = w.Write(kept.Body)
}

// answerWriter keeps a copy of the answer it passes on (up to
// maxKeptAnswer; keep false once it is larger), and its status.
type answerWriter struct {
	http.ResponseWriter
	keep   bool
	key    *keyed
	status int
	body   bytes.Buffer
}

func (a *answerWriter) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
		a.key.mu.Lock()
		if a.key.followed {
			a.Header().Set(api.IdempotentReplayedHeader, "true")
		}
		a.key.mu.Unlock()
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.WriteHeader(http.StatusOK)
	}
	if a.keep {
		if a.body.Len()+len(b) > maxKeptAnswer {
			a.keep = false
			a.body = bytes.Buffer{}
		} else {
			a.body.Write(b)
		}
	}
	return a.ResponseWriter.Write(b)
}

func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// The body's deadline.

// bodyTimeoutError is a request body that did not arrive within the
// body deadline.
type bodyTimeoutError struct{ after time.Duration }

func (e *bodyTimeoutError) Error() string {
	return fmt.Sprintf("the request's body did not arrive within %s", e.after)
}

// deadlineBody is a request body read under a deadline on its
// connection: once the body has been read to its end, the deadline is
// lifted (a route that streams or waits goes on as long as it needs);
// a read that meets it fails with a *bodyTimeoutError.
type deadlineBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	after time.Duration
	done  bool
	// timedOut: a read met the deadline (however the route wrapped the
	// error it had)
	timedOut bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF && !b.done:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut = true
		return n, &bodyTimeoutError{after: b.after}
	}
	return n, err
}

// bodyDeadline puts a request's body under the server's body deadline,
// for a route that reads its body whole (not one that streams an
// upload as it comes), and returns it (nil: none).
func (s *Server) bodyDeadline(w http.ResponseWriter, r *http.Request, rt route) *deadlineBody {
	if s.cfg.BodyTimeout <= 0 || rt.streamsBody || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) != nil {
		return nil // a writer with no connection under it (a test's recorder)
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc, after: s.cfg.BodyTimeout}
	r.Body = b
	return b
}

// bodyTimedOut answers a request whose body did not arrive in time
// (body, under the deadline, met it): 408, and the connection is closed
// (what is left of the body is not read). The request's context has
// ended with its connection's read, but the client is still there to be
// told.
func bodyTimedOut(w http.ResponseWriter, r *http.Request, body *deadlineBody, err error) bool {
	var te *bodyTimeoutError
	if !errors.As(err, &te) {
		if body == nil || !body.timedOut {
			return false
		}
		te = &bodyTimeoutError{after: body.after}
	}
	w.Header().Set("Connection", "close")
	writeError(w, r, &api.Error{Code: api.CodeRequestTimeout,
		Message: fmt.Sprintf("the request's body did not arrive within %s: nothing was done; send it again", te.after)})
	return true
}
