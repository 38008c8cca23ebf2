// Package httptool is the http tool kind: a tool that calls an HTTP API.
// Its method, URL, headers and body are templates over the call's
// arguments (.args), the run's configuration (.config: a key marked
// secret: true never reaches a checkpoint), the state and the input; the
// response is checked against its schema and its cap, and the result is
// the decoded body or what the result expression makes of it.
//
//	tools:
//	  get_weather:
//	    kind: http
//	    description: The weather in a city now.
//	    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
//	    url: "https://api.weather.example/v1/now?city={{urlquery .args.city}}"
//	    headers: {Authorization: "Bearer {{.config.weather_key}}"}
//	    response: {schema: ../schemas/weather.json}
//	    result: "response.body.current"
//	    timeout: 10s
//	    retries: 2
//	    allow: [api.weather.example]
//
// It connects only where its allow-list permits, with the check webhooks
// use (runtime/egress), made on the address dialled as the socket is
// about to connect: nothing by default; host names, *.domains, addresses
// and networks; this machine's, its networks' and a cloud's metadata
// addresses only through an address or network entry inside their block,
// never through a name. It uses no proxy and follows no redirect. A
// response outside 2xx (after the retries a 429, a 5xx or a dropped
// connection earn: retries are for calls the API may take twice, or that
// carry an idempotency_header, a key of the call's own kept with the step
// before its first attempt, so an API that honours it acts once on a call
// that was in flight when the process died) is told to the model, which
// may try again; a response larger than its cap, a body that is not JSON
// where JSON is expected, one that breaks its schema, an address the list
// does not permit and a timeout fail the node that made the call.
package httptool

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/trellisflow/trellis/runtime/config"
	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/egress"
	"github.com/trellisflow/trellis/runtime/expression"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/schema"
	"github.com/trellisflow/trellis/runtime/tmpl"
	"github.com/trellisflow/trellis/runtime/value"
)

// Defaults of a tool that sets none.
const (
	DefaultTimeout  = 30 * time.Second
	DefaultMaxBytes = 1 << 20
)

// Spec registers the tool kind.
var Spec = kind.ToolSpec{
	Name:    "http",
	Summary: "Call an HTTP API: method, URL, headers and body are templates over the call's arguments (.args), config, state and input; the response, capped and checked against its schema, is the result.",
	Fields: []config.Field{
		config.Any("parameters", "The JSON Schema of the call's arguments (an object schema): inline, or a path relative to the flow.").AlsoTypes("object", "string").Require(),
		config.String("method", "The request's method (default GET, or POST with a body).").OneOfValues("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"),
		config.Template("url", "The URL: a template over args, config, state and input (write {{urlquery .args.x}} for a value in a query).").Require(),
		config.Map("headers", "Header to template (a credential from config: {{.config.api_key}}, with secret: true in the config block).",
			config.Elem(config.Template("", ""))),
		config.Template("body", "The request's body: a template ({{json .args}} sends the arguments as JSON)."),
		config.String("content_type", "The body's media type (default application/json).").NonEmpty(1),
		config.Object("response", "What the response must be.",
			config.Any("schema", "The JSON Schema of the response's body (decoded as JSON): inline, or a path relative to the flow. A body it refuses fails the call.").AlsoTypes("object", "string"),
		),
		config.Expression("result", "The call's result: an expression over response ({status, headers, body}), args, state, input and config (default response.body)."),
		config.Duration("timeout", "How long one attempt may take, answer included (default 30s)."),
		config.Integer("retries", "Attempts after the first when the server answers 429 or 5xx or the connection fails (default 0), with backoff, honouring Retry-After.").Min(0).Max(10),
		config.Integer("max_bytes", "The largest response body taken (default 1 MiB); a larger one fails the call.").Min(1),
		config.String("idempotency_header", "Send a key of the call's own in this header (Idempotency-Key, as APIs that take one name it): the same on every attempt and when the node's step runs again after a crash, so an API that honours it acts once on a call that was in flight.").NonEmpty(1),
		config.List("allow", "Where the tool may connect, checked on the address dialled as webhooks are (runtime/egress): host names, *.domains, addresses, networks (10.0.0.0/8). Nothing by default; this machine's, its networks' and a cloud's metadata addresses only through an address or network entry inside their block, never through a name.",
			config.Elem(config.String("", "").NonEmpty(1))).NonEmpty(1),
	},
	New: build,
}

type tool struct {
	method      string
	url         *template.Template
	headers     []header
	body        *template.Template
	contentType string
	response    *schema.Validator
	result      *expression.Program
	timeout     time.Duration
	retries     int
	maxBytes    int64
	// idempotency is the header a call's key goes in ("": none)
	idempotency string
	allow       *egress.Policy
	client      *http.Client
	// secrets are the run configuration's secret keys: their values never
	// reach an error
	secrets []string
}

type header struct {
	name string
	t    *template.Template
}

var responseVars = func(body *schema.Shape) *schema.Shape {
	return schema.Object(map[string]*schema.Shape{
		"status":  {Types: []string{"integer"}},
		"headers": {Types: []string{"object"}},
		"body":    body,
	}, "status", "headers", "body")
}

func build(b kind.Builder) []*kind.Tool {
	s := b.Settings()
	params := kind.Parameters(b, s.Value("parameters"))
	var args *schema.Shape
	if params != nil {
		args = params.Validator.Shape
	}
	vars := kind.Vars{"args": args}
	t := &tool{method: http.MethodGet, contentType: "application/json", timeout: DefaultTimeout, maxBytes: DefaultMaxBytes}
	ok := params != nil
	t.url = b.Template(s.Value("url"), b.Node()+".url", vars)
	ok = ok && t.url != nil
	for _, e := range s.Entries("headers") {
		ht := b.Template(e.Value, b.Node()+".headers."+e.Name, vars)
		if ht == nil {
			ok = false
			continue
		}
		if !httpHeaderName(e.Name) {
			b.Report(diag.CodeToolSetting, e.Key.Pos(), e.Key.Path(), "%q is not an HTTP header name", e.Name)
			ok = false
		}
		t.headers = append(t.headers, header{http.CanonicalHeaderKey(e.Name), ht})
	}
	if s.Has("body") {
		if t.body = b.Template(s.Value("body"), b.Node()+".body", vars); t.body == nil {
			ok = false
		}
		t.method = http.MethodPost
	}
	if m, has := s.String("method"); has {
		t.method = m
	}
	if h, has := s.String("idempotency_header"); has {
		if !httpHeaderName(h) {
			v := s.Value("idempotency_header")
			b.Report(diag.CodeToolSetting, v.Pos(), v.Path(), "%q is not an HTTP header name", h)
			ok = false
		}
		t.idempotency = http.CanonicalHeaderKey(h)
	}
	if t.body != nil && (t.method == http.MethodGet || t.method == http.MethodHead) {
		b.Report(diag.CodeToolSetting, s.Value("body").Pos(), s.Value("body").Path(), "a %s request has no body: use POST, PUT or PATCH", t.method)
		ok = false
	}
	if ct, has := s.String("content_type"); has {
		if _, _, err := mime.ParseMediaType(ct); err != nil {
			b.Report(diag.CodeToolSetting, s.Value("content_type").Pos(), s.Value("content_type").Path(), "content_type %q is not a media type: %v", ct, err)
			ok = false
		}
		t.contentType = ct
	}
	var body *schema.Shape
	if sv := s.Object("response").Value("schema"); sv.Exists() {
		rs, err := b.Schema(sv, "response")
		switch {
		case err != nil && err.Unreadable:
			b.Report(diag.CodeToolSetting, sv.Pos(), sv.Path(), "cannot read the response schema %q (a schema, or a path relative to the flow)", sv.Text())
			ok = false
		case err != nil:
			b.Report(diag.CodeToolSetting, err.Pos, sv.Path(), "invalid response schema: %s", err.Message)
			ok = false
		default:
			t.response, body = rs.Validator, rs.Validator.Shape
		}
	}
	result := body
	if rv := s.Value("result"); rv.Exists() {
		t.result = b.Expr(rv, kind.Vars{"response": responseVars(body), "args": args})
		if t.result == nil {
			ok = false
		} else {
			result = t.result.Shape()
		}
	}
	if d, has := s.Duration("timeout"); has {
		t.timeout = d
	}
	t.retries, _ = s.Int("retries")
	if n, has := s.Int("max_bytes"); has {
		t.maxBytes = int64(n)
	}
	t.allow, ok = allowOf(b, s, t.url, ok)
	if !ok {
		return nil
	}
	t.client = t.allow.Client(t.timeout)
	for _, e := range s.Block().File().Root().Get("config").Entries() {
		if v, _ := e.Value.Get("secret").JSON(); v == true {
			t.secrets = append(t.secrets, e.Name)
		}
	}
	return []*kind.Tool{{Name: b.Node(), Parameters: params.Raw, Params: params.Validator, Result: result, Impl: t}}
}

// allowOf reads the allow-list, and checks the URL's host against it
// when the template writes the host out.
func allowOf(b kind.Builder, s config.Settings, u *template.Template, ok bool) (*egress.Policy, bool) {
	av := s.Value("allow")
	if !av.Exists() {
		b.Report(diag.CodeToolReach, b.Settings().Block().Pos(), "tools."+b.Node(), "tool %q has no allow-list, so it can reach nothing: list the hosts (or networks) it may call under allow", b.Node())
		return nil, false
	}
	var entries []string
	for _, it := range av.Items() {
		entries = append(entries, it.Text())
	}
	a, err := egress.Parse(entries)
	if err != nil {
		b.Report(diag.CodeToolReach, av.Pos(), av.Path(), "%v", err)
		return nil, false
	}
	uv := s.Value("url")
	if origin, known := literalOrigin(uv.Text()); known && u != nil {
		if err := a.CheckURL(origin); err != nil {
			host, _, _ := strings.Cut(strings.SplitN(origin, "://", 2)[1], "/")
			var de *egress.DeniedError
			if errors.As(err, &de) {
				msg := fmt.Sprintf("tool %q calls %s, which its allow-list (%s) does not permit", b.Node(), host, a)
				if de.Range != nil {
					msg += ": " + err.Error()
				}
				b.Report(diag.CodeToolReach, uv.Pos(), uv.Path(), "%s", msg)
			} else {
				b.Report(diag.CodeToolSetting, uv.Pos(), uv.Path(), "tool %q: the URL: %v", b.Node(), err)
			}
			return nil, false
		}
	}
	if u != nil {
		if p, err := url.Parse(prefix(uv.Text())); err == nil && p.Scheme != "" && p.Scheme != "http" && p.Scheme != "https" {
			b.Report(diag.CodeToolSetting, uv.Pos(), uv.Path(), "tool %q: the URL must be http or https, not %s", b.Node(), p.Scheme)
			return nil, false
		}
	}
	return a, ok
}

// prefix is the text of a template before its first action.
func prefix(text string) string {
	if i := strings.Index(text, "{{"); i >= 0 {
		return text[:i]
	}
	return text
}

// literalOrigin is the scheme and host of a URL template whose host no
// action writes (scheme://host[:port]).
func literalOrigin(text string) (string, bool) {
	p := prefix(text)
	scheme, rest, ok := strings.Cut(p, "://")
	if !ok || scheme == "" {
		return "", false
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		if len(p) < len(text) {
			return "", false // an action follows within the host
		}
		end = len(rest)
	}
	u, err := url.Parse(scheme + "://" + rest[:end])
	if err != nil || u.Hostname() == "" {
		return "", false
	}
	return u.String(), true
}

func httpHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 126 || r <= 32 || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
}

// Call implements kind.Caller. A secret of the run configuration that an
// error would show (in a URL, a server's answer) is redacted from it.
func (t *tool) Call(ctx context.Context, s kind.State, c *kind.Call) (any, error) {
	res, err := t.call(ctx, s, c)
	if err != nil && len(t.secrets) > 0 {
		cfg, _ := s.Vars()["config"].(map[string]any)
		var old []string
		for _, k := range t.secrets {
			if v, ok := cfg[k].(string); ok && len(v) >= 4 {
				old = append(old, v, "[redacted]", url.QueryEscape(v), "[redacted]")
			}
		}
		if len(old) > 0 {
			msg := strings.NewReplacer(old...).Replace(err.Error())
			if kind.IsToolFailed(err) {
				return nil, kind.ToolFailed(errors.New(msg))
			}
			return nil, errors.New(msg)
		}
	}
	return res, err
}

func (t *tool) call(ctx context.Context, s kind.State, c *kind.Call) (any, error) {
	data := maps.Clone(s.Vars())
	data["args"] = c.Args
	target, err := tmpl.Execute(t.url, data)
	if err != nil {
		return nil, fmt.Errorf("url: %w", err)
	}
	u, err := url.Parse(strings.TrimSpace(target))
	switch {
	case err != nil:
		return nil, fmt.Errorf("the URL %q does not parse: %w", target, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, fmt.Errorf("the URL %q is not an absolute http or https URL", target)
	case u.User != nil:
		return nil, fmt.Errorf("the URL %q holds user information, which is not sent", target)
	}
	if err := t.allow.CheckURL(u.String()); err != nil {
		return nil, err
	}
	hdr := http.Header{}
	for _, h := range t.headers {
		v, err := tmpl.Execute(h.t, data)
		if err != nil {
			return nil, fmt.Errorf("header %s: %w", h.name, err)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("header %s: the value holds a line break", h.name)
		}
		hdr.Set(h.name, v)
	}
	if t.idempotency != "" {
		// made once and kept with the step before the first attempt, so a
		// step run again sends the key the interrupted attempt sent
		key := c.Key
		if key == "" {
			key = strconv.Itoa(c.Seq)
		}
		v, err := s.Once(ctx, "idempotency:"+key, func(context.Context) (any, error) { return "trellis-" + strings.ToLower(crand.Text()), nil })
		if err != nil {
			return nil, err
		}
		k, _ := v.(string)
		hdr.Set(t.idempotency, k)
	}
	var body []byte
	if t.body != nil {
		text, err := tmpl.Execute(t.body, data)
		if err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		body = []byte(text)
		if hdr.Get("Content-Type") == "" {
			hdr.Set("Content-Type", t.contentType)
		}
	}
	resp, err := t.do(ctx, u.String(), hdr, body)
	if err != nil {
		return nil, err
	}
	if resp.status < 200 || resp.status > 299 {
		return nil, kind.ToolFailed(fmt.Errorf("%s %s answered %d: %s", t.method, u.Redacted(), resp.status, snippet(resp.body)))
	}
	decoded, err := t.decode(resp)
	if err != nil {
		return nil, err
	}
	if t.result == nil {
		return decoded, nil
	}
	vars := maps.Clone(data)
	vars["response"] = map[string]any{"status": resp.status, "headers": resp.headers, "body": decoded}
	out, err := t.result.Eval(vars)
	if err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return out, nil
}

// response is a response as read: its status, headers (lower-case names,
// values joined) and body within the cap.
type response struct {
	status      int
	headers     map[string]any
	contentType string
	body        []byte
}

// do sends the request, trying again on 429, 5xx and failed connections
// as retries allows.
func (t *tool) do(ctx context.Context, target string, hdr http.Header, body []byte) (*response, error) {
	backoff := 250 * time.Millisecond
	for attempt := 0; ; attempt++ {
		resp, after, err := t.once(ctx, target, hdr, body)
		retry := attempt < t.retries && ctx.Err() == nil
		switch {
		case err == nil && (resp.status == http.StatusTooManyRequests || resp.status >= 500) && retry:
		case err == nil:
			return resp, nil
		case !retry || !transient(err):
			return nil, err
		}
		wait := after
		if wait == 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, 10*time.Second)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// once makes one attempt within the timeout.
func (t *tool) once(ctx context.Context, target string, hdr http.Header, body []byte) (*response, time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(actx, t.method, target, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header = hdr.Clone()
	res, err := t.client.Do(req)
	if err != nil {
		if errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, 0, fmt.Errorf("%s %s: no answer within %s: %w", t.method, req.URL.Redacted(), t.timeout, context.DeadlineExceeded)
		}
		return nil, 0, unwrapURL(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, t.maxBytes+1))
	if err != nil {
		if errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, 0, fmt.Errorf("%s %s: the body did not arrive within %s: %w", t.method, req.URL.Redacted(), t.timeout, context.DeadlineExceeded)
		}
		return nil, 0, fmt.Errorf("reading the response: %w", err)
	}
	if int64(len(b)) > t.maxBytes {
		return nil, 0, fmt.Errorf("%s %s: the response is larger than the tool's cap of %d bytes (max_bytes)", t.method, req.URL.Redacted(), t.maxBytes)
	}
	headers := map[string]any{}
	for k, vs := range res.Header {
		headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return &response{status: res.StatusCode, headers: headers, contentType: res.Header.Get("Content-Type"), body: b},
		retryAfter(res.Header.Get("Retry-After")), nil
}

// unwrapURL drops net/http's "Get URL:" wrapping, which repeats the URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s %s: %w", ue.Op, redact(ue.URL), ue.Err)
	}
	return err
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

// transient: a failed connection or a timeout, which another attempt
// may not meet; an address the list does not permit is not.
func transient(err error) bool {
	if errors.Is(err, egress.ErrDenied) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

func retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil && s >= 0 {
		return min(time.Duration(s*float64(time.Second)), time.Minute)
	}
	if at, err := http.ParseTime(h); err == nil {
		return min(max(time.Until(at), 0), time.Minute)
	}
	return 0
}

// decode reads the body: JSON when the response has a schema or says it
// is JSON (a body that is not fails the call), else text.
func (t *tool) decode(r *response) (any, error) {
	mt, _, _ := mime.ParseMediaType(r.contentType)
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json")
	if t.response == nil && !isJSON {
		if len(r.body) == 0 {
			return "", nil
		}
		return string(bytes.ToValidUTF8(r.body, []byte("\uFFFD"))), nil
	}
	v, err := value.Decode(r.body)
	if err != nil {
		return nil, fmt.Errorf("the response is not valid JSON (%v): %s", err, snippet(r.body))
	}
	if t.response != nil {
		if err := t.response.Validate(v); err != nil {
			return nil, fmt.Errorf("the response does not match the tool's response schema: %w", err)
		}
		v = schema.Coerce(t.response.Shape, v)
	}
	return v, nil
}

// snippet is the start of a body, for messages.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(bytes.ToValidUTF8(b, []byte("\uFFFD"))))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	if s == "" {
		return "(no body)"
	}
	return strconv.Quote(s)
}

var _ kind.Caller = (*tool)(nil)
