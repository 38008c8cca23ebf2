package api

import (
	"strings"
	"testing"
)

// Numbers in the free-form parts of an answer are read as the state
// holds them: integers exactly (beyond 2^53 too), the rest as float64;
// typed fields are as they were.
func TestDecodeIsExact(t *testing.T) {
	var run Run
	body := `{"id": "r", "thread": "t", "flow": "f", "flow_version": "v", "status": "succeeded", "created": "2026-01-01T00:00:00Z",
		"checkpoint": 18446744073709551615, "input": {"n": 9007199254740993, "x": 1.5, "l": [9223372036854775807, {"k": -9223372036854775808}], "big": 1e300, "null": null}}`
	if err := decode(strings.NewReader(body), &run); err != nil {
		t.Fatal(err)
	}
	l := run.Input["l"].([]any)
	if run.Checkpoint != 18446744073709551615 || run.Input["n"] != 9007199254740993 || run.Input["x"] != 1.5 || l[0] != 9223372036854775807 ||
		l[1].(map[string]any)["k"] != -9223372036854775808 || run.Input["big"] != 1e300 || run.Input["null"] != nil {
		t.Fatalf("%#v", run)
	}
	var eb ErrorBody
	if err := decodeBytes([]byte(`{"error": {"code": "run_requeued", "message": "m", "details": {"run": "r", "n": 3}}}`), &eb); err != nil {
		t.Fatal(err)
	}
	if run, ok := WaitAgain(eb.Error); !ok || run != "r" || eb.Error.Details.(map[string]any)["n"] != 3 {
		t.Fatalf("%#v", eb.Error)
	}
}
