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
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"

	"github.com/trellisflow/trellis/schemas"
)

var (
	//go:embed index.html
	index []byte
	//go:embed dist/app.js
	script []byte
)

// etag names a file's version, for caches.
func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}

var (
	scriptTag = etag(script)
	schemaTag = etag(schemas.Flow)
)

// Handler serves GET /studio (the page), /studio/app.js (its script) and
// /studio/flow.schema.json (the flow format's JSON Schema, which the
// editor completes keys from).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		switch r.URL.Path {
		case "/studio", "/studio/":
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Frame-Options", "DENY")
			// the editor sets styles inline; the page talks to its own
			// server only
			h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
			_, _ = w.Write(index)
		case "/studio/app.js":
			serve(w, r, "text/javascript; charset=utf-8", script, scriptTag)
		case "/studio/flow.schema.json":
			serve(w, r, "application/schema+json", schemas.Flow, schemaTag)
		default:
			http.NotFound(w, r)
		}
	})
}

func serve(w http.ResponseWriter, r *http.Request, ctype string, body []byte, tag string) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("ETag", tag)
	h.Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == tag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(body)
}
