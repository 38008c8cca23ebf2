// Package page is the voice page that `trellis serve` serves at /voice: a
// person joins a thread's LiveKit room from a browser and talks (or
// types) to the flow. The script bundles the LiveKit JS client from npm
// at build time (web/, `make page`); the built bundle is committed in
// dist/, so the command builds with Go alone and serves no CDN's code.
package page

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
)

var (
	//go:embed index.html
	index []byte
	//go:embed dist/app.js
	script []byte
)

// scriptTag names the script's version, for caches.
var scriptTag = func() string {
	sum := sha256.Sum256(script)
	return `"` + hex.EncodeToString(sum[:8]) + `"`
}()

// Handler serves GET /voice (the page) and GET /voice/app.js (its script).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		switch r.URL.Path {
		case "/voice":
			h.Set("Content-Type", "text/html; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self' ws: wss: http: https:; media-src 'self' blob: mediastream:")
			_, _ = w.Write(index)
		case "/voice/app.js":
			h.Set("Content-Type", "text/javascript; charset=utf-8")
			h.Set("ETag", scriptTag)
			if r.Header.Get("If-None-Match") == scriptTag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			h.Set("Cache-Control", "no-cache")
			_, _ = w.Write(script)
		default:
			http.NotFound(w, r)
		}
	})
}
