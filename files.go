package trellis

import (
	"strings"

	"github.com/trellisflow/trellis/runtime/flow"
	"github.com/trellisflow/trellis/runtime/testfile"
)

// FindFlows lists the flow files among paths: a file is taken as it is, a
// directory is searched (skipping hidden directories and testdata) for
// YAML files that are not flow tests and have a top-level version, nodes
// or edges key (or do not parse, so that loading says why). The list is
// sorted.
func FindFlows(paths ...string) ([]string, error) {
	flows, _, err := flow.Find(paths...)
	return flows, err
}

// ScanFlows is FindFlows that also lists the YAML files of the searched
// directories it skipped as not flows.
func ScanFlows(paths ...string) (flows, skipped []string, err error) { return flow.Find(paths...) }

// FindTests lists the flow test files (*.test.yaml) among paths, as
// FindFlows does flows.
func FindTests(paths ...string) ([]string, error) {
	return flow.FindFiles(paths, func(path string) bool { return strings.HasSuffix(path, testfile.Suffix) })
}
