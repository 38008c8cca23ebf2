package kind

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Reference renders the node-kind reference in Markdown from the registry:
// each kind's summary and a table of its own settings. The settings every
// kind shares are described once, by the caller's common text.
func Reference(reg Registry, common string) []byte {
	var b strings.Builder
	b.WriteString("# Node kinds\n\n")
	b.WriteString("<!-- Generated from the node-kind registry by `make schema`; do not edit. -->\n\n")
	b.WriteString(common)
	for _, sp := range reg.Specs() {
		fmt.Fprintf(&b, "\n## `%s`\n\n%s\n", sp.Name, sp.Summary)
		if sp.Inline {
			b.WriteString("\nRuns inline: it never blocks, so the engine runs it without a goroutine of its own.\n")
		}
		var settings struct {
			Properties map[string]map[string]any `json:"properties"`
			Required   []string                  `json:"required"`
		}
		_ = json.Unmarshal([]byte(sp.Settings), &settings)
		if len(settings.Properties) == 0 {
			b.WriteString("\nNo settings of its own.\n")
			continue
		}
		b.WriteString("\n| setting | type | required | description |\n| --- | --- | --- | --- |\n")
		names := make([]string, 0, len(settings.Properties))
		for k := range settings.Properties {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			p := settings.Properties[k]
			typ, _ := p["type"].(string)
			if typ == "" {
				typ = "any"
			}
			desc, _ := p["description"].(string)
			req := ""
			if slices.Contains(settings.Required, k) {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, typ, req, strings.ReplaceAll(desc, "|", "\\|"))
		}
	}
	return []byte(b.String())
}
