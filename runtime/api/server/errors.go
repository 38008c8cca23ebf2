package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/engine"
	"github.com/trellisflow/trellis/runtime/store"
)

// This file is the one place errors become what a tenant reads: a
// stable code, a message in plain words, and details naming the field
// at fault. What a handler returns is mapped here; an error it does not
// know is internal, logged with the request's id, and answered with the
// id alone. Nothing of the machine reaches a tenant: no Go type, no
// parser's internals, no program, path or temporary file.

// errorCode is the code err is answered with.
func (s *Server) errorCode(err error) api.Code { return toAPIError(err).Code }

// toAPIError maps the errors handlers return onto the error shape; an
// error it does not know is internal, and its message is not sent.
func toAPIError(err error) *api.Error {
	var ae *api.Error
	var ie *engine.InputError
	var mbe *http.MaxBytesError
	var be *engine.BusyError
	var bj *badJSON
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("the body is larger than %d bytes", mbe.Limit)}
	case errors.As(err, &bj):
		out := &api.Error{Code: api.CodeBadRequest, Message: "the body is not valid JSON for this route: " + bj.msg}
		if bj.field != "" {
			out.Details = map[string]string{"field": bj.field}
		}
		return out
	case errors.As(err, &ie):
		return &api.Error{Code: api.CodeInvalidInput, Message: ie.Error(), Details: map[string]string{"field": ie.Field, "reason": ie.Reason, "suggestion": ie.Suggestion}}
	case errors.Is(err, store.ErrThreadID):
		return &api.Error{Code: api.CodeInvalidInput, Message: err.Error()}
	case errors.As(err, &be):
		return &api.Error{Code: api.CodeThreadBusy,
			Message: fmt.Sprintf("%s holds the thread until %s; retry then, or start the run with on_busy enqueue", be.Owner, be.Until.UTC().Format(time.RFC3339)),
			Details: map[string]string{"holder": be.Owner, "until": be.Until.UTC().Format(time.RFC3339)}}
	case errors.Is(err, engine.ErrBusy):
		return &api.Error{Code: api.CodeThreadBusy, Message: "another run holds the thread; retry, or start the run with on_busy enqueue or interrupt"}
	case errors.Is(err, engine.ErrUnfinished):
		return &api.Error{Code: api.CodeUnfinished, Message: "the thread's last run stopped part way: resume it (resume: true) or start the run with on_busy interrupt"}
	case errors.Is(err, store.ErrNotFound):
		return &api.Error{Code: api.CodeNotFound, Message: "not found"}
	case errors.Is(err, store.ErrExists):
		return &api.Error{Code: api.CodeThreadExists, Message: "a thread with that id exists"}
	case errors.Is(err, errStopping):
		return &api.Error{Code: api.CodeUnavailable, Message: "the server is stopping"}
	case errors.Is(err, store.ErrBusy):
		return &api.Error{Code: api.CodeThreadBusy, Message: "a run is queued or running on the thread: cancel it first"}
	}
	switch store.Classify(err) {
	case store.Full:
		return &api.Error{Code: api.CodeStoreFull, Message: "the store's disk is full: nothing of the request was recorded; try again once space is freed"}
	case store.Unavailable:
		return &api.Error{Code: api.CodeUnavailable, Message: "the store is unavailable: try again shortly"}
	}
	return &api.Error{Code: api.CodeInternal, Message: "internal error"}
}

var errStopping = errors.New("the server is stopping")

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := toAPIError(err)
	if ae.Code == api.CodeInternal {
		ae = &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("internal error (request %v)", r.Context().Value(requestIDKey))}
	}
	switch ae.Code {
	case api.CodeUnavailable, api.CodeRunRequeued:
		w.Header().Set("Retry-After", "1")
	case api.CodeStoreFull:
		w.Header().Set("Retry-After", "10")
	}
	if ae.Code == api.CodeUnauthorized {
		// RFC 6750: how to authenticate, and whether the token sent was
		// the trouble
		challenge := `Bearer realm="trellis"`
		if _, ok := bearer(r); ok {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	}
	writeJSON(w, ae.Code.Status(), api.ErrorBody{Error: ae})
}

// badJSON is a body that does not decode: what is wrong with it in
// words, and the field at fault (dotted, "" for the whole body).
type badJSON struct {
	msg, field string
}

func (e *badJSON) Error() string { return e.msg }

// errBadJSON matches every badJSON.
var errBadJSON = errors.New("bad JSON")

func (e *badJSON) Is(target error) bool { return target == errBadJSON }

// ReadJSON decodes a JSON request body into v as the API's routes do,
// for handlers served beside them (a Speech): it refuses another media
// type, unknown fields and anything after the value, and its errors are
// answered in plain words, the field at fault named.
func ReadJSON(r *http.Request, v any) error { return readJSON(r, v) }

// readJSON decodes a request body into v, refusing unknown fields and
// anything after the value; what does not decode is told in words.
func readJSON(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &api.Error{Code: api.CodeUnsupportedMedia, Message: "send application/json"}
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			te.Field = promoted(reflect.TypeOf(v), te.Field)
		}
		return describeJSON(err)
	}
	if dec.More() {
		return &badJSON{msg: "more than one value"}
	}
	return nil
}

// promoted is the path of a field of t as the JSON names it: the
// decoder's path names the embedded structs a field is promoted from
// (PutMemory.index), which the JSON does not have.
func promoted(t reflect.Type, field string) string {
	for t != nil {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		name, rest, ok := strings.Cut(field, ".")
		if t.Kind() != reflect.Struct || !ok {
			return field
		}
		f, found := t.FieldByName(name)
		if !found || !f.Anonymous {
			return field
		}
		t, field = f.Type, rest
	}
	return field
}

// describeJSON says in words what a JSON decoder's error means.
func describeJSON(err error) *badJSON {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.Is(err, io.EOF):
		return &badJSON{msg: "the body is empty"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &badJSON{msg: "the body ends before its value does"}
	case errors.As(err, &se):
		what := strings.TrimPrefix(se.Error(), "json: ")
		if what == "exceeded max depth" {
			what = "it nests deeper than 10000 levels"
		}
		return &badJSON{msg: fmt.Sprintf("%s (at byte %d)", what, se.Offset)}
	case errors.As(err, &te):
		return &badJSON{msg: describeType(te), field: te.Field}
	case errors.As(err, &pe):
		return &badJSON{msg: "want a time such as 2026-01-02T15:04:05Z (RFC 3339)"}
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ := strconv.Unquote(f)
		return &badJSON{msg: fmt.Sprintf("this route takes no field %s", f), field: name}
	}
	return &badJSON{msg: "it is not a JSON value this route takes"}
}

// describeType says what a field holds that its type does not take.
func describeType(te *json.UnmarshalTypeError) string {
	want := jsonKind(te.Type)
	where := "the body"
	if te.Field != "" {
		where = fmt.Sprintf("field %q", te.Field)
	}
	got, num := strings.CutPrefix(te.Value, "number ")
	if !num {
		return fmt.Sprintf("%s is %s, not %s", where, article(te.Value), want)
	}
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if _, err := strconv.ParseInt(strings.TrimPrefix(got, "-"), 10, 64); err != nil && !strings.ContainsAny(got, ".eE") {
			return fmt.Sprintf("%s is %s, out of its range: want %s", where, got, want)
		}
		return fmt.Sprintf("%s is %s, not %s", where, got, want)
	case reflect.Float32, reflect.Float64:
		return fmt.Sprintf("%s: %s", where, numberOutOfRange(got))
	}
	return fmt.Sprintf("%s is a number, not %s", where, want)
}

// article puts "a" or "an" before a JSON kind's name.
func article(kind string) string {
	switch kind {
	case "object", "array":
		return "an " + kind
	case "bool":
		return "true or false"
	case "":
		return "a value"
	}
	return "a " + kind
}

// jsonKind names in JSON's words what a Go type takes.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	if t == reflect.TypeFor[time.Time]() {
		return "a time such as 2026-01-02T15:04:05Z (RFC 3339)"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonKind(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return fmt.Sprintf("an integer from %d to %d", math.MinInt64, math.MaxInt64)
	case reflect.Int32:
		return fmt.Sprintf("an integer from %d to %d", math.MinInt32, math.MaxInt32)
	case reflect.Int8, reflect.Int16:
		return fmt.Sprintf("an integer from %d to %d", math.MinInt16, math.MaxInt16)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer from 0 up"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

// numberOutOfRange says a number is past what a value holds.
func numberOutOfRange(num string) string {
	return fmt.Sprintf("the number %s is out of range: a number is at most about 1.8e308 in magnitude (a 64-bit float), an integer from %d to %d", num, math.MinInt64, math.MaxInt64)
}
