package diag

import "embed"

// Examples holds a failing and a passing flow for every code, the
// fixtures the tests hold the validator to and `trellis explain` shows:
// examples/CODE.bad.yaml with the output of validating it in
// examples/CODE.bad.diags, and examples/CODE.ok.yaml, the same flow
// fixed. Prompt files they name are in examples/prompts.
//
//go:embed examples
var Examples embed.FS
