package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/store"
)

// Sender works the store's queue of deliveries for one server: it claims
// a delivery that is due, posts it signed, and records the attempt.
type Sender struct {
	// Store keeps the deliveries; Server names this server in it.
	Store  store.Webhooks
	Server string
	// Secret signs the messages.
	Secret []byte
	// Allow is where messages may go.
	Allow *egress.Policy
	// Payload is the body of a delivery's message (the run's record);
	// store.ErrNotFound gives the delivery up (its run is gone).
	Payload func(ctx context.Context, d *store.Delivery) ([]byte, error)
	// Timeout bounds one attempt (default 10s); a claim lasts twice as
	// long and a second more, so a server that dies holding one frees
	// it soon after.
	Timeout time.Duration
	// Attempts is how many attempts a delivery gets (default 8); Backoff
	// the wait before the second, doubled before each one after, up to
	// MaxBackoff (defaults 5s and 1h), each less a random tenth.
	Attempts            int
	Backoff, MaxBackoff time.Duration
	// Every is how often the queue is looked at when it was empty
	// (default 1s).
	Every time.Duration
	// Workers is how many deliveries are under way at once (default 4),
	// so that a slow receiver holds up no other's messages.
	Workers int
	Log     *slog.Logger

	client *http.Client
	kick   chan struct{}
}

func (s *Sender) defaults() {
	if s.Timeout == 0 {
		s.Timeout = 10 * time.Second
	}
	if s.Attempts == 0 {
		s.Attempts = 8
	}
	if s.Backoff == 0 {
		s.Backoff = 5 * time.Second
	}
	if s.MaxBackoff == 0 {
		s.MaxBackoff = time.Hour
	}
	if s.Every == 0 {
		s.Every = time.Second
	}
	if s.Workers == 0 {
		s.Workers = 4
	}
	if s.Log == nil {
		s.Log = slog.New(slog.DiscardHandler)
	}
	if s.client == nil {
		s.client = s.Allow.Client(s.Timeout)
	}
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
	}
}

// Kick has the sender look at the queue now (a run just ended).
func (s *Sender) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// orphanAge is how old a delivery whose run was never recorded must be
// to be dropped: older than any start that could still record it.
const orphanAge = time.Hour

// Run works the queue until ctx ends: Workers goroutines each claim and
// attempt deliveries while there are any due, then wait for a kick or
// the next look; one of them drops the orphans now and then.
func (s *Sender) Run(ctx context.Context) {
	s.defaults()
	var wg sync.WaitGroup
	for i := range s.Workers {
		wg.Go(func() { s.work(ctx, i == 0) })
	}
	wg.Wait()
}

func (s *Sender) work(ctx context.Context, sweeper bool) {
	t := time.NewTicker(s.Every)
	defer t.Stop()
	lastSweep := time.Time{}
	for {
		for ctx.Err() == nil {
			sent, err := s.DeliverOne(ctx)
			if err != nil && ctx.Err() == nil {
				s.Log.Warn("webhook queue", "error", err.Error())
			}
			if !sent {
				break
			}
		}
		if sweeper && time.Since(lastSweep) > orphanAge/4 {
			lastSweep = time.Now()
			if n, err := s.Store.DropOrphanDeliveries(ctx, time.Now().Add(-orphanAge)); err != nil && ctx.Err() == nil {
				s.Log.Warn("webhook queue: dropping orphans", "error", err.Error())
			} else if n > 0 {
				s.Log.Info("webhook queue: dropped the deliveries of runs never recorded", "count", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// DeliverOne claims one due delivery, attempts it and records the
// attempt; it reports whether there was one.
func (s *Sender) DeliverOne(ctx context.Context) (bool, error) {
	s.defaults()
	d, err := s.Store.ClaimDelivery(ctx, s.Server, 2*s.Timeout+time.Second)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim a delivery: %w", err)
	}
	a := s.attempt(ctx, d)
	if ctx.Err() != nil && a.Status == 0 {
		return true, ctx.Err() // stopping with no answer: the claim expires, and the delivery is tried again
	}
	switch {
	case a.Status >= 200 && a.Status < 300:
		d.Status, d.Next = store.DeliveryDelivered, time.Time{}
	case a.N >= s.Attempts || a.final:
		d.Status, d.Next = store.DeliveryFailed, time.Time{}
	default:
		d.Status, d.Next = store.DeliveryPending, a.At.Add(s.backoff(a.N))
	}
	// an answer is recorded even as the server stops: a receiver that
	// acknowledged is not sent the message again by another server
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := s.Store.RecordAttempt(rctx, s.Server, d, a.DeliveryAttempt); err != nil {
		return true, fmt.Errorf("record attempt %d of delivery %s: %w", a.N, d.ID, err)
	}
	level := slog.LevelInfo
	if d.Status != store.DeliveryDelivered {
		level = slog.LevelWarn
	}
	s.Log.Log(ctx, level, "webhook", "delivery", d.ID, "run", d.Run, "attempt", a.N, "status", a.Status, "error", a.Error, "outcome", string(d.Status))
	return true, nil
}

// recordTimeout bounds recording an attempt, which a server stopping
// still does once the receiver answered.
const recordTimeout = 5 * time.Second

// backoff is the wait after attempt n failed.
func (s *Sender) backoff(n int) time.Duration {
	b := s.Backoff
	for i := 1; i < n && b < s.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, s.MaxBackoff)
	return b - time.Duration(rand.Int64N(int64(b)/10+1))
}

// attempt is one attempt; final, when no later attempt would do better
// (an address not allowed, a run that is gone).
type attempt struct {
	store.DeliveryAttempt
	final bool
}

// attempt posts d once.
func (s *Sender) attempt(ctx context.Context, d *store.Delivery) (a attempt) {
	a = attempt{DeliveryAttempt: store.DeliveryAttempt{N: d.Attempts + 1, At: time.Now().UTC(), Server: s.Server}}
	defer func() { a.Took = time.Since(a.At) }()
	if err := s.Allow.CheckURL(d.URL); err != nil {
		a.Error, a.final = err.Error(), true
		return a
	}
	body, err := s.Payload(ctx, d)
	if err != nil {
		a.Error = "the run's record: " + err.Error()
		if errors.Is(err, store.ErrNotFound) {
			a.final = true
		}
		return a
	}
	rctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		a.Error, a.final = err.Error(), true
		return a
	}
	now := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "trellis-webhook")
	req.Header.Set(HeaderID, d.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(s.Secret, d.ID, now, body))
	resp, err := s.client.Do(req)
	if err != nil {
		a.Error = err.Error()
		if de := (*egress.DeniedError)(nil); errors.As(err, &de) {
			// refused where it was dialled: the policy's reason alone,
			// and no later attempt would do better
			a.Error, a.final = de.Error(), true
		}
		return a
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	a.Status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.Error = "the receiver answered " + resp.Status
	}
	return a
}
