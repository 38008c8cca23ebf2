package diag

import (
	"encoding/json"
	"testing"
)

// A diagnostic written as JSON reads back the same, so a client of the
// API decodes the diagnostics a server sends.
func TestDiagnosticJSONRoundTrip(t *testing.T) {
	in := []Diagnostic{
		{Severity: Error, Code: "G001", Pos: Pos{File: "f.yaml", Line: 3, Col: 7}, Summary: "edge target is not a node", Suggestion: "b"},
		{Severity: Warning, Code: "P003", Pos: Pos{File: "f.yaml", Line: 9, Col: 1}, Summary: "may be null"},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []Diagnostic
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("read back %+v", out)
	}
	var s Severity
	if err := json.Unmarshal([]byte(`"fatal"`), &s); err == nil {
		t.Fatal("an unknown severity was read")
	}
}
