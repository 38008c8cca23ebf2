package server

import (
	"errors"
	"mime"
	"net/http"
	"strings"

	"github.com/trellisflow/trellis/runtime/api"
)

// studioFormSignIn is the studio's sign-in from a browser: the file
// `trellis studio` writes posts the one-time token here as a form, and
// the answer is the studio's page carrying the key the token was
// exchanged for (the page keeps it in its tab). The token travels in the
// request's body and the key in the answer's, so that neither is in an
// address the browser opens, and so in none its history records; the
// answer is not stored by caches. A token that does not sign in answers
// the page too, telling why, with 401 (a client that does not take HTML
// gets the JSON error).
func (s *Server) studioFormSignIn(w http.ResponseWriter, r *http.Request, _ *caller) error {
	if s.cfg.Studio == nil {
		return &api.Error{Code: api.CodeNotFound, Message: "this server serves no studio page"}
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return &api.Error{Code: api.CodeUnsupportedMedia, Message: "send the token as a form (application/x-www-form-urlencoded)"}
	}
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return &api.Error{Code: api.CodeInvalidInput, Message: "the form does not parse: " + err.Error()}
	}
	out := api.StudioSignInResult{}
	sess, err := s.exchangeStudioToken(r.Context(), r.PostForm.Get("token"))
	var ae *api.Error
	switch {
	case err == nil:
		out.Session = sess
	case errors.As(err, &ae) && ae.Code == api.CodeUnauthorized && takesHTML(r):
		out.Error = ae
	default:
		return err
	}
	s.cfg.Studio.ServeHTTP(w, r.WithContext(api.WithStudioSignIn(r.Context(), out)))
	return nil
}

// takesHTML reports whether the request's Accept names HTML, as a
// browser's navigation does.
func takesHTML(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && (mt == "text/html" || mt == "application/xhtml+xml") && params["q"] != "0" {
			return true
		}
	}
	return false
}
