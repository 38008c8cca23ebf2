// Package schemas holds the documents Trellis publishes: the JSON Schema
// of the flow format (generated from the node kinds' declarations) and the
// OpenAPI document of the HTTP API. They are embedded, so a server or a
// tool serves exactly the committed copies.
package schemas

import _ "embed"

// Flow is schemas/flow.schema.json.
//
//go:embed flow.schema.json
var Flow []byte

// OpenAPI is schemas/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
