package store

import (
	"context"
	"errors"
	"time"
)

// Webhooks keeps the webhook deliveries of runs: a run that names a
// webhook has a delivery from the moment it is queued, which becomes due
// when the run ends. Deliveries are a queue every server sharing the
// store works: a server claims a due delivery for a while (so no other
// sends it meanwhile), sends it, and records the attempt; a delivery
// that failed is due again after a backoff, and one whose server died is
// claimed again once its claim expires, so that a restart or another
// server delivers it. The built-in stores implement it, and
// storetest.RunWebhooks is its conformance suite.
//
// A thread's deliveries and their attempts are deleted with the thread.
type Webhooks interface {
	// AddDelivery records a delivery (Status pending); ErrExists when
	// one with its id exists.
	AddDelivery(ctx context.Context, d *Delivery) error
	// ClaimDelivery gives server, for claim, the delivery that has been
	// due longest: pending, its run ended, its next attempt due and no
	// live claim on it, by the store's clock; ErrNotFound when none is.
	// Two servers claiming at once never get the same delivery.
	ClaimDelivery(ctx context.Context, server string, claim time.Duration) (*Delivery, error)
	// RecordAttempt records an attempt (numbered a.N, d.Attempts+1 of
	// the delivery as claimed) of a delivery server claimed and how the
	// delivery stands after it (d's Status and Next): delivered, pending
	// again (due at Next), or failed for good; the claim ends.
	// ErrClaimLost when server's claim was lost (it expired and another
	// server took the delivery).
	RecordAttempt(ctx context.Context, server string, d *Delivery, a DeliveryAttempt) error
	// Deliveries lists the deliveries of a tenant's run, with their
	// attempts, oldest first.
	Deliveries(ctx context.Context, tenant, run string) ([]*Delivery, error)
	// DropOrphanDeliveries deletes the pending deliveries created before
	// before whose run does not exist (refused before it started, or
	// never recorded), and returns how many.
	DropOrphanDeliveries(ctx context.Context, before time.Time) (int, error)
}

// ErrClaimLost: another server took what a server meant to (a delivery
// whose claim expired, a schedule's tick) first.
var ErrClaimLost = errors.New("the claim was taken by another server")

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// The states of a delivery.
const (
	// DeliveryPending: not delivered yet; due once its run has ended and
	// its Next has come.
	DeliveryPending DeliveryStatus = "pending"
	// DeliveryDelivered: the receiver answered 2xx.
	DeliveryDelivered DeliveryStatus = "delivered"
	// DeliveryFailed: given up, after its last attempt or an address
	// that is never sent to.
	DeliveryFailed DeliveryStatus = "failed"
)

// Delivery is the webhook of one run.
type Delivery struct {
	ID             string
	Tenant, Thread string
	Run            string
	URL            string
	Status         DeliveryStatus
	// Attempts counts the attempts made; Next is when the next is due.
	Attempts int
	Next     time.Time
	Created  time.Time
	Updated  time.Time
	// Log holds the attempts, oldest first (filled by Deliveries).
	Log []DeliveryAttempt
}

// DeliveryAttempt is one attempt to deliver a webhook.
type DeliveryAttempt struct {
	// N numbers the delivery's attempts from 1.
	N      int
	At     time.Time
	Server string
	// Status is the receiver's HTTP status (0: no answer); Error says
	// why an attempt failed.
	Status int
	Error  string
	Took   time.Duration
}

// WebhooksOf returns st's Webhooks.
func WebhooksOf(st Store) (Webhooks, bool) {
	w, ok := st.(Webhooks)
	return w, ok
}
