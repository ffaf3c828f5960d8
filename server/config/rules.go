package config

import (
	"maps"
	"slices"
)

// Rules returns every rule of domain, in the order of their composite
// keys, level by level.
func (c *Config) Rules(domain string) []*Rule {
	var out []*Rule
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil {
			return
		}
		if n.rule != nil {
			out = append(out, n.rule)
		}
		for _, k := range slices.Sorted(maps.Keys(n.children)) {
			walk(n.children[k])
		}
	}
	walk(c.domains[domain])
	return out
}
