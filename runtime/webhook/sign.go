// Package webhook posts the end of a run to the address the run named,
// signed as Standard Webhooks (and Stripe) sign: an HMAC-SHA256 over the
// message's id, its timestamp and its body, in the webhook-id,
// webhook-timestamp and webhook-signature headers, so that a receiver
// knows the message came from the server and is fresh.
//
// Deliveries are a queue in the store (store.Webhooks): a run that names
// a webhook has its delivery recorded before it starts, and a Sender on
// any server sharing the store claims it once the run has ended, posts
// it, and records the attempt; a failed attempt is tried again after a
// backoff, and a server that dies holding a claim loses it when the
// claim expires, so that a restart or another server delivers. A
// receiver may so get a message more than once (a server killed after
// posting and before recording): the webhook-id header is the same each
// time, for the receiver to drop repeats by.
//
// Nothing is sent to an address the Sender's egress.Policy does not
// permit, checked on the address actually connected to.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed message (Standard Webhooks).
const (
	HeaderID        = "Webhook-Id"
	HeaderTimestamp = "Webhook-Timestamp"
	HeaderSignature = "Webhook-Signature"
)

// secretPrefix starts a secret's text form (Standard Webhooks).
const secretPrefix = "whsec_"

// ParseSecret reads a secret in its text form: whsec_ and the secret's
// bytes in base64, at least 24 of them.
func ParseSecret(text string) ([]byte, error) {
	b64, ok := strings.CutPrefix(strings.TrimSpace(text), secretPrefix)
	if !ok {
		return nil, fmt.Errorf("webhook secret: want %s followed by base64", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("webhook secret: %w", err)
	}
	if len(key) < 24 {
		return nil, fmt.Errorf("webhook secret: %d bytes, want at least 24", len(key))
	}
	return key, nil
}

// NewSecret returns a new random secret in its text form.
func NewSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return secretPrefix + base64.StdEncoding.EncodeToString(key)
}

// Sign returns the webhook-signature of a message: v1, and the base64
// HMAC-SHA256, under secret, of its id, its timestamp (Unix seconds) and
// its body joined by dots.
func Sign(secret []byte, id string, at time.Time, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + strconv.FormatInt(at.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Sign errors.
var (
	ErrNoSignature = errors.New("no valid webhook signature")
	ErrStale       = errors.New("the webhook's timestamp is too far from now")
)

// Verify checks a received message's headers against its body: one of
// the signatures of webhook-signature (space separated) is body's under
// secret, and webhook-timestamp is within tolerance of now, so that a
// message captured once cannot be replayed later.
func Verify(secret []byte, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	id, ts := h.Get(HeaderID), h.Get(HeaderTimestamp)
	if id == "" || ts == "" {
		return fmt.Errorf("%w: missing %s or %s", ErrNoSignature, HeaderID, HeaderTimestamp)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrNoSignature, HeaderTimestamp, ts)
	}
	at := time.Unix(sec, 0)
	if d := now.Sub(at); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s", ErrStale, at.UTC().Format(time.RFC3339))
	}
	want := Sign(secret, id, at, body)
	for _, sig := range strings.Fields(h.Get(HeaderSignature)) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrNoSignature
}
