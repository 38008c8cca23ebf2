package cli

import (
	"errors"
	"maps"
	"strings"

	"github.com/trellisflow/trellis/runtime/diag"
	"github.com/trellisflow/trellis/runtime/eval"
	"github.com/trellisflow/trellis/runtime/kind"
	"github.com/trellisflow/trellis/runtime/versions"
)

// splitDatasets takes the eval datasets (*.eval.yaml) out of the files
// validate found: those named as flows (a file named is taken as it is)
// and those it skipped in a directory as no flow.
func splitDatasets(files, skipped []string) (flows, notFlows, datasets []string) {
	for _, f := range files {
		if strings.HasSuffix(f, eval.Suffix) {
			datasets = append(datasets, f)
		} else {
			flows = append(flows, f)
		}
	}
	for _, f := range skipped {
		if strings.HasSuffix(f, eval.Suffix) {
			datasets = append(datasets, f)
		} else {
			notFlows = append(notFlows, f)
		}
	}
	return flows, notFlows, datasets
}

// CheckDatasets checks eval datasets as trellis eval reads them, without
// running a case: the format, then every value, name and expression
// against the flow each evaluates. A flow that does not load is named at
// the dataset's flow key; its own problems are reported in its file.
func CheckDatasets(files []string, kinds kind.Registry) (diag.List, diag.Sources) {
	var all diag.List
	sources := diag.Sources{}
	for _, path := range files {
		ds, err := eval.Load(path)
		var le *diag.ListError
		switch {
		case errors.As(err, &le):
			all = append(all, le.List...)
			maps.Copy(sources, le.Sources)
			continue
		case err != nil:
			all.Errorf(diag.CodeResource, diag.Pos{File: path}, "", "the dataset cannot be read: %v", err)
			continue
		}
		sources[path] = ds.Source
		f, _ := versions.Compile(nil, ds.FlowPath(), nil, kinds)
		if f == nil {
			all.Errorf(diag.CodeResource, ds.FlowPos, "flow", "flow: %s does not load (trellis validate %s says why)", ds.Flow, ds.FlowPath())
			continue
		}
		_, dl := eval.Bind(ds, f.Graph())
		all = append(all, dl...)
	}
	return all, sources
}
