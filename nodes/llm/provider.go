package llm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// DefaultModel is used when neither a node, its prompt, its flow nor the
// environment names a model.
const DefaultModel = "gpt-4o-mini"

// Provider is an OpenAI-compatible endpoint and how to call it.
type Provider struct {
	// BaseURL is the API root (…/v1); empty means OpenAI's.
	BaseURL string
	// APIKey is sent as a bearer token. It is never written to state,
	// events or errors.
	APIKey string
	// Model is the default model.
	Model string
	// Override, when set, is the model every node asks, whatever its own,
	// its prompt's or its flow's setting names (trellis eval --model
	// compares a flow on another model).
	Override string
	// Retries is how many times a failed call (429, 5xx, timeout, broken
	// connection) is repeated; Backoff is the first wait, doubled up to
	// MaxBackoff. A Retry-After header overrides the wait.
	Retries             int
	Backoff, MaxBackoff time.Duration
	// Timeout bounds one call.
	Timeout time.Duration
	// HTTP is the client to use (nil: a default one).
	HTTP *http.Client
	// Cassette, when set, answers from recorded replies (replaying: no
	// call leaves the process) or records the model's replies.
	Cassette *Cassette
}

// FromEnv returns the provider the environment configures: OPENAI_BASE_URL
// and OPENAI_API_KEY (either one is enough, so a local server without keys
// works), TRELLIS_MODEL for the default model. It returns nil when no model
// is configured.
func FromEnv() *Provider {
	base, key := os.Getenv("OPENAI_BASE_URL"), os.Getenv("OPENAI_API_KEY")
	if base == "" && key == "" {
		return nil
	}
	return &Provider{BaseURL: base, APIKey: key, Model: os.Getenv("TRELLIS_MODEL")}
}

// FromEnvModel is the model a node with no model of its own uses.
func FromEnvModel() string {
	if m := os.Getenv("TRELLIS_MODEL"); m != "" {
		return m
	}
	return DefaultModel
}

func (p *Provider) withDefaults() *Provider {
	q := *p
	if q.Model == "" {
		q.Model = DefaultModel
	}
	if q.Retries == 0 {
		q.Retries = 3
	}
	if q.Backoff == 0 {
		q.Backoff = 500 * time.Millisecond
	}
	if q.MaxBackoff == 0 {
		q.MaxBackoff = 20 * time.Second
	}
	if q.Timeout == 0 {
		q.Timeout = 2 * time.Minute
	}
	if q.HTTP == nil {
		q.HTTP = &http.Client{Transport: modelTransport}
	}
	return &q
}

// modelTransport carries the calls of providers given no client of their
// own. Unlike http.DefaultTransport, which keeps two idle connections per
// host, it keeps as many as a server's concurrent calls to one model
// server use, so that calls over HTTP/1.1 (a model served on the
// machine or the network, not over HTTP/2) go on over the connections of
// the calls before them instead of dialling, and closing, one each.
var modelTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no bound but the one per host
	t.MaxIdleConnsPerHost = 512
	return t
}()

// CloseIdleConnections closes the connections the calls of providers
// given no client keep for the calls after them (as a test does when its
// model server is gone).
func CloseIdleConnections() { modelTransport.CloseIdleConnections() }

// client is a provider's go-openai configuration with our retry policy.
type client struct {
	p   *Provider
	cfg openai.ClientConfig
}

func newClient(p *Provider) *client {
	p = p.withDefaults()
	cfg := openai.DefaultConfig(p.APIKey)
	if p.BaseURL != "" {
		cfg.BaseURL = strings.TrimRight(p.BaseURL, "/")
	}
	cfg.HTTPClient = p.HTTP
	return &client{p: p, cfg: cfg}
}

// try is one request of a call: a go-openai client of its own, whose
// requests go through it, so it sees the Retry-After header of a failed
// response (go-openai's errors do not carry headers).
type try struct {
	c     *http.Client
	after time.Duration // the failed response's Retry-After, 0 when none
	// resp is the last response that succeeded: a streamed reply's body
	// is read from it (see chunkStream)
	resp *http.Response
	// retrying, when set (the try streamed output), hears that the try
	// failed and the call is made again after wait
	retrying func(err error, wait time.Duration)
}

// client returns a go-openai client sending its requests through t.
func (t *try) client(cfg openai.ClientConfig) *openai.Client {
	cfg.HTTPClient = t
	return openai.NewClientWithConfig(cfg)
}

// Do implements openai.HTTPDoer.
func (t *try) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.c.Do(req)
	switch {
	case err != nil:
	case resp.StatusCode >= 400:
		t.after = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	default:
		t.resp = resp
	}
	return resp, err
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent.
func parseRetryAfter(h string, now time.Time) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// call runs one request with retries. attempt is called once per try with
// a context bounded by the provider's timeout, a go-openai client for
// that try, and the try (whose resp is the response the client had).
func (c *client) call(ctx context.Context, attempt func(ctx context.Context, oa *openai.Client, t *try) error) error {
	backoff := c.p.Backoff
	for n := 0; ; n++ {
		t := &try{c: c.p.HTTP}
		actx, cancel := context.WithTimeout(ctx, c.p.Timeout)
		err := attempt(actx, t.client(c.cfg), t)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n >= c.p.Retries || !retryable(err) {
			return err
		}
		wait := t.after
		if wait == 0 {
			// full jitter keeps clients that failed together apart
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, c.p.MaxBackoff)
		}
		if t.retrying != nil {
			t.retrying(err, wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// retryable: rate limits, server errors, timeouts and broken connections.
func retryable(err error) bool {
	var api *openai.APIError
	var req *openai.RequestError
	status := 0
	switch {
	case errors.As(err, &api):
		status = api.HTTPStatusCode
	case errors.As(err, &req):
		status = req.HTTPStatusCode
	}
	if status != 0 {
		return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, errTruncated)
}

var errTruncated = errors.New("the reply stream ended early")

// temperature turns an explicit 0 into the smallest positive float, which
// go-openai does not drop as an empty field.
func temperature(t *float32) float32 {
	if t == nil {
		return 0
	}
	if *t == 0 {
		return math.SmallestNonzeroFloat32
	}
	return *t
}

// redact removes the API key from s.
func (c *client) redact(s string) string {
	if c == nil || len(c.p.APIKey) < 4 {
		return s
	}
	return strings.ReplaceAll(s, c.p.APIKey, "[redacted]")
}

func (c *client) errorf(err error) error {
	return fmt.Errorf("model: %s", c.redact(err.Error()))
}
