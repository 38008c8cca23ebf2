package diag

import (
	"encoding/json"
	"io"
	"path/filepath"
)

// WriteSARIF writes the diagnostics as a SARIF 2.1.0 log (the format code
// scanning tools read, such as GitHub's), with every code as a rule and
// the tool named with its version. Columns count Unicode code points, as
// the diagnostics do.
func WriteSARIF(w io.Writer, l List, version string) error {
	type text struct {
		Text string `json:"text"`
	}
	type level struct {
		Level string `json:"level"`
	}
	type rule struct {
		ID               string `json:"id"`
		ShortDescription text   `json:"shortDescription"`
		Default          level  `json:"defaultConfiguration"`
	}
	type region struct {
		StartLine   int `json:"startLine"`
		StartColumn int `json:"startColumn"`
		EndColumn   int `json:"endColumn,omitempty"`
	}
	type artifact struct {
		URI string `json:"uri"`
	}
	type physical struct {
		Artifact artifact `json:"artifactLocation"`
		Region   *region  `json:"region,omitempty"`
	}
	type location struct {
		Physical physical `json:"physicalLocation"`
	}
	type result struct {
		RuleID    string     `json:"ruleId"`
		RuleIndex int        `json:"ruleIndex"`
		Level     string     `json:"level"`
		Message   text       `json:"message"`
		Locations []location `json:"locations"`
	}
	rules := make([]rule, len(Codes))
	index := map[Code]int{}
	for i, c := range Codes {
		rules[i] = rule{ID: string(c.Code), ShortDescription: text{c.Doc}, Default: level{"error"}}
		index[c.Code] = i
	}
	results := make([]result, 0, len(l))
	for _, d := range l {
		loc := physical{Artifact: artifact{URI: filepath.ToSlash(d.File)}}
		if d.Line > 0 {
			loc.Region = &region{StartLine: d.Line, StartColumn: max(d.Col, 1)}
			if d.EndCol > d.Col {
				loc.Region.EndColumn = d.EndCol
			}
		}
		msg := d.Message()
		if d.Detail != "" {
			msg += "\n" + d.Detail
		}
		results = append(results, result{RuleID: string(d.Code), RuleIndex: index[d.Code], Level: d.Severity.String(),
			Message: text{msg}, Locations: []location{{Physical: loc}}})
	}
	log := map[string]any{
		"$schema": "https://json.schemastore.org/sarif-2.1.0.json",
		"version": "2.1.0",
		"runs": []any{map[string]any{
			"tool": map[string]any{"driver": map[string]any{
				"name": "trellis", "version": version, "informationUri": "https://github.com/trellisflow/trellis", "rules": rules,
			}},
			"columnKind": "unicodeCodePoints",
			"results":    results,
		}},
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(log)
}
