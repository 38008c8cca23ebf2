package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// ExpandMerges applies YAML merge keys (<<: *base, or <<: [*a, *b]) in
// the tree under n, as YAML 1.1 defines them and designers use them: the
// keys of the mappings merged in are set where the merge key stands,
// unless the mapping sets them itself; of several mappings merged, the
// first that sets a key gives it. A merged value keeps its position, the
// anchor's. It fails on a merge key whose value is not a mapping (or a
// list of them).
func ExpandMerges(n *yaml.Node) error {
	return expandMerges(n, map[*yaml.Node]bool{})
}

// isMerge reports whether k is a merge key: << unquoted.
func isMerge(k *yaml.Node) bool { return k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" }

func expandMerges(n *yaml.Node, done map[*yaml.Node]bool) error {
	if n == nil || done[n] {
		return nil
	}
	done[n] = true
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			if err := expandMerges(c, done); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		return expandMerges(n.Alias, done)
	case yaml.MappingNode:
	default:
		return nil
	}
	hasMerge := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		hasMerge = hasMerge || isMerge(n.Content[i])
		if err := expandMerges(n.Content[i+1], done); err != nil {
			return err
		}
	}
	if !hasMerge {
		return nil
	}
	own := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !isMerge(k) {
			own[k.Value] = true
		}
	}
	var out []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !isMerge(k) {
			out = append(out, k, v)
			continue
		}
		var sources []*yaml.Node
		switch r := resolve(v); {
		case r == nil:
		case r.Kind == yaml.MappingNode:
			sources = []*yaml.Node{r}
		case r.Kind == yaml.SequenceNode:
			for _, s := range r.Content {
				sources = append(sources, resolve(s))
			}
		}
		if len(sources) == 0 {
			return fmt.Errorf("line %d: a merge key (<<) takes a mapping, an alias of one (*name) or a list of them", k.Line)
		}
		for _, src := range sources {
			if src == nil || src.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: a merge key (<<) takes a mapping, an alias of one (*name) or a list of them", k.Line)
			}
			for j := 0; j+1 < len(src.Content); j += 2 {
				sk := src.Content[j]
				if own[sk.Value] {
					continue
				}
				own[sk.Value] = true
				out = append(out, sk, src.Content[j+1])
			}
		}
	}
	n.Content = out
	return nil
}
