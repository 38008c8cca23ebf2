package mcpserver

import (
	"io"
	"net/http"
	"sync"
)

// inproc sends requests to a handler in the process, streaming its answer
// as it writes it (a run's Server-Sent Events arrive as they happen).
type inproc struct {
	h http.Handler
	// remote is the address of the client the requests are made for
	remote string
}

// RoundTrip implements http.RoundTripper.
func (t inproc) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	r := req.Clone(req.Context())
	r.RemoteAddr, r.RequestURI = t.remote, req.URL.RequestURI()
	go func() {
		defer func() {
			if p := recover(); p != nil {
				pw.CloseWithError(io.ErrUnexpectedEOF)
			}
			w.WriteHeader(http.StatusOK) // answered with no body
			pw.Close()
		}()
		t.h.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req}, nil
}

// pipeWriter is the handler's side: the status and headers once written,
// then the body through the pipe.
type pipeWriter struct {
	header http.Header
	sent   http.Header
	status int
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush implements http.Flusher: what is written is sent at once.
func (w *pipeWriter) Flush() {}
