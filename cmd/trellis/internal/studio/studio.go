// Package studio is Trellis Studio, the page `trellis studio` opens and
// `trellis serve` serves at /studio: a flow's graph drawn from the API's
// graph JSON, its YAML and prompts edited with diagnostics as they are
// typed, runs started and streamed with the running node lit up on the
// graph, paused runs answered in place, and a thread's checkpoints as a
// timeline to read, diff, fork and correct. The page calls only the
// public HTTP API, with the key it signed in with.
//
// Its script bundles CodeMirror and dagre from npm at build time (web/,
// `make page`); the built bundle is committed in dist/, so the command
// builds with Go alone and serves no CDN's code.
package studio

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"html"
	"net/http"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/schemas"
)

var (
	//go:embed index.html
	page []byte
	//go:embed dist/app.js
	script []byte
)

// etag names a file's version, for caches.
func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// asset is a file the page loads: its text, gzipped once, and its
// version. The page names it with its version (?v=), so that a browser
// keeps it for good and asks again only for another version.
type asset struct {
	ctype    string
	body, gz []byte
	tag      string
}

func newAsset(ctype string, body []byte) *asset {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(body)
	_ = zw.Close()
	return &asset{ctype: ctype, body: body, gz: buf.Bytes(), tag: etag(body)}
}

var (
	scriptAsset = newAsset("text/javascript; charset=utf-8", script)
	schemaAsset = newAsset("application/schema+json", schemas.Flow)
	// index is the page, naming its script and the schema by version
	index = bytes.Replace(bytes.Replace(page,
		[]byte(`<script src="/studio/app.js"></script>`), []byte(`<script src="/studio/app.js?v=`+scriptAsset.tag+`"></script>`), 1),
		[]byte(`<meta name="trellis-schema" content="/studio/flow.schema.json">`),
		[]byte(`<meta name="trellis-schema" content="/studio/flow.schema.json?v=`+schemaAsset.tag+`">`), 1)
)

// Handler serves GET /studio (the page), /studio/app.js (its script) and
// /studio/flow.schema.json (the flow format's JSON Schema, which the
// editor completes keys from), and the page answering a form sign-in
// (POST /studio/signin, once the server has exchanged the token): the script and the schema gzipped to a
// client that takes it, and kept by browsers for good under the versioned
// address the page names them by.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		switch r.URL.Path {
		case "/studio", "/studio/":
			pageHeaders(h)
			h.Set("Cache-Control", "no-cache")
			_, _ = w.Write(index)
		case "/studio/signin":
			res, ok := api.StudioSignInFrom(r.Context())
			if !ok || r.Method != http.MethodPost {
				http.NotFound(w, r)
				return
			}
			signedIn(w, res)
		case "/studio/app.js":
			scriptAsset.serve(w, r)
		case "/studio/flow.schema.json":
			schemaAsset.serve(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

func pageHeaders(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Frame-Options", "DENY")
	// the editor sets styles inline; the page talks to its own server
	// only
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
}

// signedIn answers a form sign-in with the page carrying the key the
// token was exchanged for (or why it was not), in a meta element its
// script reads, keeps in its tab and removes. The answer is stored by no
// cache: the key is in its body.
func signedIn(w http.ResponseWriter, res api.StudioSignInResult) {
	h := w.Header()
	pageHeaders(h)
	h.Set("Cache-Control", "no-store")
	var meta string
	status := http.StatusOK
	if res.Session != nil {
		meta = `<meta name="trellis-studio-key" content="` + html.EscapeString(res.Session.Key) + `">`
	} else {
		msg := "this sign-in did not work"
		if res.Error != nil {
			msg = res.Error.Message
		}
		meta = `<meta name="trellis-studio-sign-in-error" content="` + html.EscapeString(msg) + `">`
		status = http.StatusUnauthorized
	}
	body := bytes.Replace(index, []byte("<head>\n"), []byte("<head>\n"+meta+"\n"), 1)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (a *asset) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Add("Vary", "Accept-Encoding")
	if r.URL.Query().Get("v") == a.tag {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	body, tag := a.body, `"`+a.tag+`"`
	if acceptsGzip(r) {
		body, tag = a.gz, `"`+a.tag+`-gz"`
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("ETag", tag)
	if r.Header.Get("If-None-Match") == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(strings.TrimSpace(q), " ", "") != "q=0" {
			return true
		}
	}
	return false
}
