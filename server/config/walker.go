package config

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The keys envoy's loader accepts, at any level of a file (its validKeys).
// One written where it means nothing is ignored, as envoy ignores it, with
// a warning.
var envoyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true,
	"rate_limit": true, "unit": true, "requests_per_unit": true, "unlimited": true,
	"shadow_mode": true, "quota_mode": true, "name": true, "replaces": true,
	"detailed_metric": true, "value_to_metric": true, "share_threshold": true,
}

// The keys each level takes: envoy's, and ratekeeper's extensions.
var (
	rootKeys       = []string{"domain", "descriptors", "quota_buckets"}
	descriptorKeys = []string{"key", "value", "rate_limit", "rate_limits", "descriptors",
		"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold"}
	rateLimitKeys = []string{"requests_per_unit", "unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "period", "count_over_limit", "refunds", "lease", "calendar", "time_zone"}
	leaseKeys    = []string{"ttl"}
	limitKeys    = []string{"name", "requests_per_unit", "unit", "algorithm", "burst", "period", "count_over_limit", "refunds", "calendar", "time_zone"}
	replacesKeys = []string{"name"}
)

// maxExpanded bounds the nodes that a file's aliases add to the walk,
// beyond the nodes written in the file, so that a few lines of nested
// aliases cannot make the walk endless. A file without aliases is bounded
// by its size only (maxFileSize).
const maxExpanded = 1 << 20

// maxDepth bounds how deep descriptors nest: deeper ones are refused, so
// that a file's memory stays linear in its size (each level's rule holds
// the keys of the levels above it).
const maxDepth = 64

// walker reads one file's nodes, collecting every problem it finds.
type walker struct {
	file     string
	errs     []error
	warnings []error
	// budget is the nodes the walk may still visit: the file's own, plus
	// maxExpanded. spent: it ran out, and the walk stops, reporting
	// nothing more, since what is left unread would only seem missing.
	budget int
	spent  bool
	// tooDeep: descriptors nested deeper than maxDepth were reported.
	tooDeep bool
}

// errorf records a problem at node n (its line), in field.
func (w *walker) errorf(n *yaml.Node, field, format string, args ...any) {
	if w.spent {
		return
	}
	w.errs = append(w.errs, &Error{File: w.file, Line: line(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

// warnf records something accepted that has no effect.
func (w *walker) warnf(n *yaml.Node, field, format string, args ...any) {
	if w.spent {
		return
	}
	w.warnings = append(w.warnings, &Error{File: w.file, Line: line(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

// countNodes counts the nodes written in a document, not following
// aliases.
func countNodes(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

func line(n *yaml.Node) int {
	if n == nil {
		return 0
	}
	return n.Line
}

// deref follows aliases to the node they stand for, and spends the walk's
// budget: false once it is spent.
func (w *walker) deref(n *yaml.Node) (*yaml.Node, bool) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if w.spent {
		return n, false
	}
	w.budget--
	if w.budget < 0 {
		w.errorf(n, "", "the document is too large once its aliases are expanded: they add over %d nodes to those written; the rest of the file was not read", maxExpanded)
		w.spent = true
		return n, false
	}
	return n, true
}

// field is one key of a mapping and its value.
type field struct {
	key   string
	k, v  *yaml.Node
	path  string
	given bool // written in the mapping itself, not merged into it with <<
}

// fields reads mapping m at path: the keys of known, each once (the last
// written counts, as with yaml.v2), after merges. A key envoy knows but this
// level does not is ignored with a warning, as envoy ignores it, unless the
// mapping is strict (one of ratekeeper's extensions, which envoy never
// reads); any other key is an error.
func (w *walker) fields(m *yaml.Node, path string, known []string, strict bool) map[string]*field {
	out := map[string]*field{}
	w.mapPairs(m, path, known, strict, out, true)
	return out
}

func (w *walker) mapPairs(m *yaml.Node, path string, known []string, strict bool, out map[string]*field, given bool) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, ok := w.deref(m.Content[i])
		if !ok {
			return
		}
		v, ok := w.deref(m.Content[i+1])
		if !ok {
			return
		}
		if k.Kind == yaml.ScalarNode && k.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 && k.Value == "<<" {
			w.merge(v, path, known, strict, out)
			continue
		}
		name, ok := w.key(k, path)
		if !ok {
			continue
		}
		p := join(path, name)
		if !slices.Contains(known, name) {
			if envoyKeys[name] && !strict {
				w.warnf(k, p, "ignored: %s has no meaning here", name)
				w.envoyCheck(v, p)
			} else {
				w.errorf(k, p, "unknown key '%s'%s", name, suggest(name, known))
			}
			continue
		}
		if prev := out[name]; prev != nil && prev.given && given {
			w.warnf(k, p, "given twice (also on line %d): the last one counts", line(prev.k))
		}
		out[name] = &field{key: name, k: k, v: v, path: p, given: given}
	}
}

// merge takes the keys of a YAML merge (<<: *anchor) into out.
func (w *walker) merge(v *yaml.Node, path string, known []string, strict bool, out map[string]*field) {
	switch v.Kind {
	case yaml.MappingNode:
		w.mapPairs(v, path, known, strict, out, false)
	case yaml.SequenceNode:
		for _, e := range v.Content {
			e, ok := w.deref(e)
			if !ok {
				return
			}
			if e.Kind != yaml.MappingNode {
				w.errorf(e, path, "<< merges mappings only")
				continue
			}
			w.mapPairs(e, path, known, strict, out, false)
		}
	default:
		w.errorf(v, path, "<< merges mappings only")
	}
}

// key returns a mapping key, which must be a string, as envoy requires.
func (w *walker) key(k *yaml.Node, path string) (string, bool) {
	if k.Kind != yaml.ScalarNode || resolve(k).kind != kindStr {
		text := k.Value
		if k.Kind != yaml.ScalarNode {
			text = "(a " + kindName(k) + ")"
		}
		w.errorf(k, path, "key %s is not a string", text)
		return "", false
	}
	return k.Value, true
}

// envoyCheck checks a value that is ignored as envoy's loader checks every
// value: mappings hold known string keys, lists hold mappings, and no
// number is a float.
func (w *walker) envoyCheck(v *yaml.Node, path string) {
	switch v.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, ok := w.deref(v.Content[i])
			if !ok {
				return
			}
			val, ok := w.deref(v.Content[i+1])
			if !ok {
				return
			}
			if k.Kind == yaml.ScalarNode && k.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 && k.Value == "<<" {
				w.envoyCheck(val, path)
				continue
			}
			name, ok := w.key(k, path)
			if !ok {
				continue
			}
			if !envoyKeys[name] {
				w.errorf(k, join(path, name), "unknown key '%s'", name)
				continue
			}
			w.envoyCheck(val, join(path, name))
		}
	case yaml.SequenceNode:
		for i, e := range v.Content {
			e, ok := w.deref(e)
			if !ok {
				return
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			if e.Kind != yaml.MappingNode {
				w.errorf(e, p, "must be a mapping, not %s", describe(e))
				continue
			}
			w.envoyCheck(e, p)
		}
	case yaml.ScalarNode:
		w.notFloat(v, path)
	}
}

// notFloat rejects the numbers envoy's loader rejects anywhere: floats
// and integers above MaxInt64.
func (w *walker) notFloat(v *yaml.Node, path string) bool {
	switch resolve(v).kind {
	case kindFloat:
		w.errorf(v, path, "%s is read as a floating-point number, which envoy's format does not accept; quote it if it is a string", v.Value)
		return false
	case kindBigInt:
		w.errorf(v, path, "%s is too large a number", v.Value)
		return false
	}
	return true
}

// str reads a string field: any scalar's text, as yaml.v2 gives it, and ""
// for null.
func (w *walker) str(f *field) (string, bool) {
	if f == nil {
		return "", true
	}
	if f.v.Kind != yaml.ScalarNode {
		w.errorf(f.v, f.path, "must be a string, not %s", describe(f.v))
		return "", false
	}
	if !w.notFloat(f.v, f.path) {
		return "", false
	}
	if resolve(f.v).kind == kindNull {
		return "", true
	}
	return f.v.Value, true
}

// boolean reads a boolean field; null is false.
func (w *walker) boolean(f *field) bool {
	if f == nil {
		return false
	}
	if f.v.Kind == yaml.ScalarNode {
		switch s := resolve(f.v); s.kind {
		case kindBool:
			return s.b
		case kindNull:
			return false
		}
	}
	w.errorf(f.v, f.path, "must be true or false, not %s", describe(f.v))
	return false
}

// integer reads an integer field within [lo, hi]; null is 0.
func (w *walker) integer(f *field, lo, hi int64) (int64, bool) {
	if f == nil {
		return 0, true
	}
	if f.v.Kind == yaml.ScalarNode {
		switch s := resolve(f.v); s.kind {
		case kindNull:
			return 0, true
		case kindInt:
			if s.i < lo || s.i > hi {
				w.errorf(f.v, f.path, "must be between %d and %d, got %d", lo, hi, s.i)
				return 0, false
			}
			return s.i, true
		case kindFloat, kindBigInt:
			w.notFloat(f.v, f.path)
			return 0, false
		}
	}
	w.errorf(f.v, f.path, "must be an integer, not %s", describe(f.v))
	return 0, false
}

// list returns the elements of a list field, each a mapping; null is an
// empty list.
func (w *walker) list(f *field) []*yaml.Node {
	if !w.is(f, yaml.SequenceNode, "a list") {
		return nil
	}
	var out []*yaml.Node
	for i, e := range f.v.Content {
		e, ok := w.deref(e)
		if !ok {
			return nil
		}
		if e.Kind != yaml.MappingNode {
			w.errorf(e, fmt.Sprintf("%s[%d]", f.path, i), "must be a mapping, not %s", describe(e))
			continue
		}
		out = append(out, e)
	}
	return out
}

// mapping returns a mapping field; nil for null, as yaml.v2 leaves a
// pointer nil.
func (w *walker) mapping(f *field) *yaml.Node {
	if !w.is(f, yaml.MappingNode, "a mapping") {
		return nil
	}
	return f.v
}

// is reports whether f holds a node of kind. An absent or null field does
// not, silently; any other node is an error saying it must be what.
func (w *walker) is(f *field, kind yaml.Kind, what string) bool {
	if f == nil || f.v.Kind == yaml.ScalarNode && resolve(f.v).kind == kindNull {
		return false
	}
	if f.v.Kind != kind {
		if f.v.Kind == yaml.ScalarNode {
			w.notFloat(f.v, f.path)
		}
		w.errorf(f.v, f.path, "must be %s, not %s", what, describe(f.v))
		return false
	}
	return true
}

// join appends a key to a YAML path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest proposes the known key that name misspells, as
// "requestsperunit" for "requests_per_unit".
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	for _, k := range known {
		if norm(k) == norm(name) {
			return fmt.Sprintf(" (did you mean '%s'?)", k)
		}
	}
	return ""
}
