package server

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/schemas"
)

// The OpenAPI document a server serves names the server it is served
// from, as the request reached it: its scheme, host and the prefix it is
// mounted under, so that a client generated from it, or a tool trying
// its routes, calls this server and not the document's placeholder.

// documentServers is the servers block of schemas/openapi.yaml, which the
// served document replaces.
var documentServers = []byte("servers:\n  - url: http://127.0.0.1:8080\n")

// forwardedHost is a host (and port) as a proxy may forward it.
var forwardedHost = regexp.MustCompile(`^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$`)

// forwardedPrefix is a path prefix as a proxy may forward it.
var forwardedPrefix = regexp.MustCompile(`^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*/?$`)

// servedDocument is schemas/openapi.yaml with the server r reached: the
// scheme (TLS, or X-Forwarded-Proto from a proxy in front), the host
// (X-Forwarded-Host, or the request's), and the prefix the handler is
// mounted under (the part of the request's path before /openapi.yaml,
// after X-Forwarded-Prefix when a proxy strips one).
func servedDocument(r *http.Request) ([]byte, error) {
	if !bytes.Contains(schemas.OpenAPI, documentServers) {
		return nil, errors.New("schemas/openapi.yaml: its servers block is not the one the server replaces")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := strings.ToLower(r.Header.Get("X-Forwarded-Proto")); p == "https" || p == "http" {
		scheme = p
	}
	host := r.Host
	if h := r.Header.Get("X-Forwarded-Host"); forwardedHost.MatchString(h) {
		host = h
	}
	if !forwardedHost.MatchString(host) {
		host = "127.0.0.1"
		if _, port, err := net.SplitHostPort(r.Host); err == nil {
			if _, err := strconv.Atoi(port); err == nil {
				host = net.JoinHostPort(host, port)
			}
		}
	}
	// the path as the client sent it (RequestURI), not as a mount that
	// strips a prefix passes it on (URL.Path)
	path := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil && u.Path != "" {
		path = u.Path
	}
	prefix := strings.TrimSuffix(path, "/openapi.yaml")
	if p := r.Header.Get("X-Forwarded-Prefix"); p != "" && forwardedPrefix.MatchString(p) {
		prefix = strings.TrimSuffix(p, "/") + prefix
	}
	if !forwardedPrefix.MatchString(prefix) {
		prefix = ""
	}
	u := (&url.URL{Scheme: scheme, Host: host, Path: prefix}).String()
	served := "servers:\n  - url: " + strconv.Quote(u) + "\n    description: This server, as the request for this document reached it.\n"
	return bytes.Replace(schemas.OpenAPI, documentServers, []byte(served), 1), nil
}
