package store

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"
)

// Class is what a store's error says of the store itself, as opposed to
// the request: whether the same request may succeed later.
type Class uint8

// The classes of store errors (Classify).
const (
	// Permanent: the error is the request's (a conflict, a missing
	// thread, a value the store refuses) or its caller's (its context
	// ended); the same request fails the same way again.
	Permanent Class = iota
	// Unavailable: the store did not answer or refused for the moment:
	// its connections were cut, its server is starting up or out of
	// connections, it gave up waiting for a lock, or it rolled the
	// transaction back for a conflict of its own (serialization,
	// deadlock). The same request may succeed later. A write that failed
	// so may have been committed all the same (its reply was lost): see
	// WriteID.
	Unavailable
	// Full: the store's disk is full. Writes fail, committing nothing,
	// until space is freed; reads go on.
	Full
)

func (c Class) String() string {
	switch c {
	case Unavailable:
		return "unavailable"
	case Full:
		return "full"
	}
	return "permanent"
}

var (
	classifiersMu sync.RWMutex
	classifiers   []func(error) Class
)

// RegisterClassifier adds a store package's knowledge of its driver's
// errors to Classify (a store package calls it from init, as it
// registers its scheme): c returns Permanent for the errors it does not
// know.
func RegisterClassifier(c func(error) Class) {
	classifiersMu.Lock()
	defer classifiersMu.Unlock()
	classifiers = append(classifiers, c)
}

// Classify says what err, returned by a store, says of the store: the
// one place where a store's errors are judged transient or not, so that
// the engine, the server and the command line retry, wait and answer
// alike. An error of the caller's context is Permanent: the caller gave
// up, the store did not fail.
func Classify(err error) Class {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Permanent
	}
	switch err {
	case ErrNotFound, ErrConflict, ErrExists, ErrLeased:
		// a store's own answer, as it stands (it wraps nothing): the
		// store is up and said no
		return Permanent
	}
	var full *FullError
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.As(err, &full) {
		return Full
	}
	classifiersMu.RLock()
	cs := classifiers
	classifiersMu.RUnlock()
	for _, c := range cs {
		if k := c(err); k != Permanent {
			return k
		}
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, io.ErrUnexpectedEOF):
		return Unavailable
	case errors.As(err, &ne):
		// a dial or a read that failed: the connection, not the request
		return Unavailable
	}
	return Permanent
}

// FullError is a store's disk-full error, as a store that finds it
// otherwise than through ENOSPC reports it.
type FullError struct{ Err error }

func (e *FullError) Error() string { return "the store's disk is full: " + e.Err.Error() }
func (e *FullError) Unwrap() error { return e.Err }

// NewWriteID makes a write id: what a write records of itself so that,
// tried again after a failure that may have come after its commit, it
// recognises itself (see CommitOnce).
func NewWriteID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DefaultWait is how long a piece of work waits for its store through
// outages, in all, when its Retrier sets no budget.
const DefaultWait = time.Minute

// Retrier tries a piece of work's store calls again while the store is
// unavailable or full (Classify), with backoff, within one budget of
// waiting for all of its calls (a run's steps, events and end share
// one), and tells who listens when the store goes and comes back. Its
// zero value waits DefaultWait; a nil one never waits. It is safe for
// concurrent use.
type Retrier struct {
	// Budget bounds the time the work waits for the store, in all (0:
	// DefaultWait; negative: no wait at all).
	Budget time.Duration
	// Down is told once an outage begins (the first call that finds the
	// store unavailable), with its error; Back once a call succeeds after
	// it, with how long it lasted.
	Down func(err error)
	Back func(lasted time.Duration)

	mu      sync.Mutex
	waited  time.Duration
	downAt  time.Time // zero: the store answers
	backoff time.Duration
}

// The backoff between attempts: from retryFirst, doubled up to
// retryMost, each drawn from its upper half so that the writers of one
// store do not all come back at once.
const (
	retryFirst = 20 * time.Millisecond
	retryMost  = 2 * time.Second
)

// ErrWaitedOut wraps the error of a call that failed for the store after
// its work had waited its whole budget.
var ErrWaitedOut = errors.New("waited for the store as long as allowed")

// Again decides on a failed call: when err says the store is unavailable
// or full and the budget allows, it waits its backoff and returns nil
// (try again); otherwise it returns the error, wrapped with ErrWaitedOut
// when the budget is spent, or ctx's when ctx ends first.
func (r *Retrier) Again(ctx context.Context, err error) error {
	if r == nil || Classify(err) == Permanent {
		return err
	}
	budget := r.Budget
	if budget == 0 {
		budget = DefaultWait
	}
	r.mu.Lock()
	first := r.downAt.IsZero()
	if first {
		r.downAt = time.Now()
		r.backoff = retryFirst
	}
	left := budget - r.waited
	d := r.backoff/2 + rand.N(r.backoff/2+1)
	r.backoff = min(2*r.backoff, retryMost)
	r.mu.Unlock()
	if first && r.Down != nil {
		r.Down(err)
	}
	if left <= 0 {
		return fmt.Errorf("%w (%s): %w", ErrWaitedOut, budget, err)
	}
	d = min(d, left)
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	r.waited += time.Since(start)
	r.mu.Unlock()
	return nil
}

// Ok notes a call that succeeded: an outage under way is over.
func (r *Retrier) Ok() {
	if r == nil {
		return
	}
	r.mu.Lock()
	at := r.downAt
	r.downAt = time.Time{}
	r.mu.Unlock()
	if !at.IsZero() && r.Back != nil {
		r.Back(time.Since(at))
	}
}

// Waited is how long the work has waited for the store so far.
func (r *Retrier) Waited() time.Duration {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waited
}

// Do runs call until it succeeds, fails for good, or the budget is
// spent (see Again); a nil Retrier runs it once. again tells call whether an earlier attempt failed
// for the store: a write may then have been committed by it.
func (r *Retrier) Do(ctx context.Context, call func(again bool) error) error {
	for again := false; ; again = true {
		err := call(again)
		if err == nil {
			r.Ok()
			return nil
		}
		if werr := r.Again(ctx, err); werr != nil {
			return werr
		}
	}
}
