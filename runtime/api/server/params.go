package server

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/trellisflow/trellis/runtime/api"
	"github.com/trellisflow/trellis/runtime/store"
)

// Every parameter of a route (path, query or header) is parsed into the
// range schemas/openapi.yaml gives it before it is used; anything else is
// a 400 bad_request that names it, in its message and as
// details.parameter.

// maxCheckpoint is the largest checkpoint number: the stores keep them as
// signed 64-bit integers.
const maxCheckpoint = math.MaxInt64

// badParam is the error of a parameter outside its range.
func badParam(name, format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeBadRequest, Message: name + " " + fmt.Sprintf(format, args...),
		Details: map[string]string{"parameter": name}}
}

// intParam parses an integer from lo to hi (def when absent or empty).
func intParam(value, name string, lo, hi, def int64) (int64, error) {
	if value == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil || n < lo || n > hi || strings.HasPrefix(value, "+") {
		return 0, badParam(name, "is an integer from %d to %d", lo, hi)
	}
	return n, nil
}

// queryInt parses the query parameter name as intParam does.
func queryInt(r *http.Request, name string, lo, hi, def int64) (int64, error) {
	return intParam(r.URL.Query().Get(name), name, lo, hi, def)
}

// queryCheckpoint parses the query parameter name as a checkpoint number
// (0 when absent).
func queryCheckpoint(r *http.Request, name string) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 || strings.HasPrefix(v, "+") {
		return 0, badParam(name, "is a checkpoint number, an integer from 1 to %d", int64(maxCheckpoint))
	}
	return uint64(n), nil
}

// queryBool parses the query parameter name as true or false (false when
// absent).
func queryBool(r *http.Request, name string) (bool, error) {
	switch r.URL.Query().Get(name) {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, badParam(name, "is true or false")
}

// queryEnum parses the query parameter name as one of values ("" when
// absent).
func queryEnum(r *http.Request, name string, values ...string) (string, error) {
	v := r.URL.Query().Get(name)
	if v == "" || slices.Contains(values, v) {
		return v, nil
	}
	return "", badParam(name, "is one of %s", strings.Join(values, ", "))
}

// sources are the values of a history's source filter.
var sources = []string{string(store.SourceCreate), string(store.SourceFork), string(store.SourceInput), string(store.SourceStep),
	string(store.SourceRun), string(store.SourceUpdate), string(store.SourceBase), string(store.SourceAbandon), string(store.SourceMigrate)}
