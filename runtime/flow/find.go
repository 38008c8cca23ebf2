package flow

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Find lists the flow files among paths: a file is taken as it is, a
// directory is searched (skipping hidden directories and testdata) for
// YAML files that are not flow tests and have a top-level version, nodes
// or edges key (or do not parse, so that loading says why). The list is
// sorted. skipped lists the YAML files of the searched directories it
// skipped as not flows.
func Find(paths ...string) (flows, skipped []string, err error) {
	flows, err = FindFiles(paths, func(path string) bool {
		ext := filepath.Ext(path)
		if ext != ".yaml" && ext != ".yml" || strings.HasSuffix(path, ".test"+ext) {
			return false
		}
		if !looksLikeFlow(path) {
			skipped = append(skipped, path)
			return false
		}
		return true
	})
	slices.Sort(skipped)
	return flows, skipped, err
}

// FindFiles lists the files among paths that keep takes: a file is
// taken as it is, a directory is searched (skipping hidden directories
// and testdata). The list is sorted.
func FindFiles(paths []string, keep func(path string) bool) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && path != p && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata"):
				return filepath.SkipDir
			case !d.IsDir() && keep(path):
				out = append(out, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func looksLikeFlow(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return true
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return true // broken YAML: loading says why
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return false // a list or a scalar: some other YAML file
	}
	for _, k := range []string{"version", "nodes", "edges"} {
		if _, ok := top[k]; ok {
			return true
		}
	}
	return false
}
