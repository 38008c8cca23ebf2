package flow_test

import (
	"bytes"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/kind/kindtest"
)

// The flow format's schema is compiled at load without its check against
// the metaschema: it is generated here, and this test holds it valid.
func TestFormatSchemaIsValid(t *testing.T) {
	b, err := flow.FormatSchema(kindtest.Registry())
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	if err := c.AddResource("file:///flow.schema.json", bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compile("file:///flow.schema.json"); err != nil {
		t.Fatalf("the generated flow schema is not valid JSON Schema: %v", err)
	}
}
