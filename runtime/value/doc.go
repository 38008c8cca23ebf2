// Package value defines the Go form of state values and their codecs.
//
// State values are JSON values held as Go values of a fixed set of types:
// nil, bool, int, float64, string, []any and map[string]any. Normalize
// brings any JSON-like Go value to that form; Decode parses JSON text into
// it; FromYAML converts YAML; Pack and Unpack are the compact binary form
// stores keep derived data in; TypeOf names a value's JSON type. The
// package knows nothing of schemas: package schema checks values against
// them and coerces numbers to the types they declare.
package value
