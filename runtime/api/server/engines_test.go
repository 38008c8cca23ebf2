package server

import (
	"errors"
	"html"
	"mime"
	"net/http"
	"strings"

	"github.com/trellisflow/trellis/runtime/api"
)

// The handlers a program gives a server (Config.Speech, Page, Studio)
// belong to the program: the trellis command gives its offline speech
// engines and its pages, whose own tests (and the command's tests of
// them through this server) check what they do. The tests here check
// what the server does around them (who may call them, how their
// requests are bounded and their errors answered) with the smallest
// handlers that answer as the document says.

// smallSpeech takes the requests of the speech routes as the document
// describes them and answers with an empty recording, or an empty
// transcription.
type smallSpeech struct{}

func (smallSpeech) Speak(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Model          string  `json:"model"`
		Input          string  `json:"input"`
		Voice          string  `json:"voice"`
		ResponseFormat string  `json:"response_format"`
		Speed          float64 `json:"speed"`
		Instructions   string  `json:"instructions"`
	}
	if err := ReadJSON(r, &in); err != nil {
		return err
	}
	if strings.TrimSpace(in.Input) == "" {
		return &api.Error{Code: api.CodeInvalidInput, Message: "input is empty: there is nothing to say"}
	}
	w.Header().Set("Content-Type", "audio/wav")
	return nil
}

func (smallSpeech) Transcribe(w http.ResponseWriter, r *http.Request) error {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		return &api.Error{Code: api.CodeUnsupportedMedia, Message: "send multipart/form-data with the recording in the file field"}
	}
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return &api.Error{Code: api.CodeBadRequest, Message: "the body is not a multipart form: " + err.Error()}
	}
	defer r.MultipartForm.RemoveAll()
	if _, _, err := r.FormFile("file"); err != nil {
		return &api.Error{Code: api.CodeInvalidInput, Message: "the form has no file field with the recording"}
	}
	writeJSON(w, http.StatusOK, map[string]string{"text": ""})
	return nil
}

// smallPage serves a page at each path it is asked for.
func smallPage(kind string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".js") {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			_, _ = w.Write([]byte("// the " + kind + " page's script\n"))
			return
		}
		if strings.HasSuffix(r.URL.Path, ".json") {
			w.Header().Set("Content-Type", "application/schema+json")
			_, _ = w.Write([]byte("{}\n"))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		// a form sign-in's outcome, as the studio's page carries it
		if res, ok := api.StudioSignInFrom(r.Context()); ok {
			w.Header().Set("Cache-Control", "no-store")
			if res.Error != nil {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte("<!doctype html><title>" + kind + "</title><meta name=error content=\"" + html.EscapeString(res.Error.Message) + "\">\n"))
				return
			}
			_, _ = w.Write([]byte("<!doctype html><title>" + kind + "</title><meta name=key content=\"" + res.Session.Key + "\">\n"))
			return
		}
		_, _ = w.Write([]byte("<!doctype html><title>" + kind + "</title>\n"))
	})
}
