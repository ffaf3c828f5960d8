package config

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// build validates the files and builds their Config, or returns every
// problem found.
func build(files []file) (*Config, error) {
	docs := make([]*parsed, len(files))
	for i, f := range files {
		docs[i] = parseFile(f)
	}
	return assemble(docs)
}

// assemble builds the Config of documents read, each one domain, or
// returns every problem found.
func assemble(docs []*parsed) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	var errs []error
	first := map[string]string{} // domain -> where it was defined
	for _, p := range docs {
		c.files = append(c.files, p.name)
		errs = append(errs, p.errs...)
		c.warnings = append(c.warnings, p.warnings...)
		if p.domain == "" {
			continue
		}
		// A pushed resource has no lines.
		where := p.name
		if l := line(p.domainNode); l > 0 {
			where = fmt.Sprintf("%s:%d", p.name, l)
		}
		if prev, dup := first[p.domain]; dup {
			errs = append(errs, &Error{File: p.name, Line: line(p.domainNode), Field: "domain",
				Msg: fmt.Sprintf("duplicate domain '%s' in config file (first defined at %s)", p.domain, prev)})
			continue
		}
		first[p.domain] = where
		c.domains[p.domain] = p.root
		c.names = append(c.names, p.domain)
	}
	if len(errs) > 0 {
		sortErrors(errs)
		return nil, errors.Join(errs...)
	}
	slices.Sort(c.names)
	return c, nil
}

// parsed is one file, read.
type parsed struct {
	name       string
	domain     string
	domainNode *yaml.Node
	root       *node
	errs       []error
	warnings   []error
}

// yamlLine finds the line in a yaml error message.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseFile reads and validates one file.
func parseFile(f file) *parsed {
	var doc yaml.Node
	if err := yaml.Unmarshal(f.data, &doc); err != nil {
		e := &Error{File: f.name, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = "invalid YAML: " + m[2]
		}
		return &parsed{name: f.name, errs: []error{e}}
	}
	return parseDocument(f.name, &doc)
}

// parseDocument validates the document of the file named name: its
// nodes, as parsed from the file's YAML, or built from a pushed resource.
func parseDocument(name string, doc *yaml.Node) *parsed {
	w := &walker{file: name}
	w.budget = countNodes(doc) + maxExpanded
	b := &builder{walker: w}
	root := b.document(doc)
	return &parsed{name: name, domain: b.domain, domainNode: b.domainNode, root: root, errs: w.errs, warnings: w.warnings}
}

// builder builds a file's descriptor tree and rules.
type builder struct {
	*walker
	domain     string
	domainNode *yaml.Node
}

// document reads a file's document: a mapping of domain and descriptors.
func (b *builder) document(doc *yaml.Node) *node {
	root := &node{children: map[string]*node{}}
	var m *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		m, _ = b.deref(doc.Content[0])
	}
	if m != nil && m.Kind == yaml.ScalarNode && resolve(m).kind == kindNull {
		m = nil
	}
	if m != nil && m.Kind != yaml.MappingNode {
		b.errorf(m, "", "a configuration file is a mapping of domain and descriptors, not %s", describe(m))
		return root
	}
	fs := map[string]*field{}
	if m != nil {
		fs = b.fields(m, "", rootKeys, false)
	}
	domain, ok := b.str(fs["domain"])
	if ok && domain == "" {
		if f := fs["domain"]; f != nil {
			b.errorf(f.v, "domain", "config file cannot have empty domain")
		} else {
			b.errorf(m, "domain", "config file cannot have empty domain: name the domain the descriptors belong to")
		}
	}
	b.domain = domain
	if f := fs["domain"]; f != nil {
		b.domainNode = f.k
	}
	b.descriptors(root, fs["descriptors"], "", nil, nil, 1)
	if f := fs["quota_buckets"]; f != nil {
		root.quota = b.quotaBuckets(f)
	}
	return root
}

// descriptors reads a list of descriptors into parent, whose rule name is
// namePath ("" for the domain), whose levels have the keys keys and share
// the counters of shared (see Rule.SharedValues), at depth (1 for the
// domain's).
func (b *builder) descriptors(parent *node, list *field, namePath string, keys, shared []string, depth int) {
	if depth > maxDepth && list != nil && !b.isNull(list.v) {
		if !b.tooDeep {
			b.errorf(list.v, "descriptors", "descriptors nest more than %d levels deep", maxDepth)
			b.tooDeep = true
		}
		return
	}
	items := b.list(list)
	for i, item := range items {
		if b.spent {
			return
		}
		p := fmt.Sprintf("%s[%d]", list.path, i)
		fs := b.fields(item, p, descriptorKeys, false)
		key, keyOK := b.str(fs["key"])
		value, valueOK := b.str(fs["value"])
		n := &node{key: key, value: value, children: map[string]*node{}}
		composite := key
		if value != "" {
			composite += "_" + value
		}
		attach := keyOK && valueOK
		switch {
		case keyOK && key == "":
			b.errorf(item, join(p, "key"), "descriptor has empty key")
			attach = false
		case attach && parent.children[composite] != nil:
			b.errorf(item, p, "duplicate descriptor composite key '%s'", b.domain+"."+join(namePath, composite))
			attach = false
		}
		name := join(namePath, composite)

		share := b.boolean(fs["share_threshold"])
		level := ""
		if share {
			if !strings.HasSuffix(composite, "*") {
				b.errorf(fs["share_threshold"].k, fs["share_threshold"].path,
					"share_threshold can only be used with wildcard values (ending with '*'), but found key '%s'", composite)
			}
			level = cmp.Or(value, composite)
		}
		here := append(slices.Clip(shared), level)
		keysHere := append(slices.Clip(keys), key)

		r := &Rule{
			Domain:         b.domain,
			Name:           name,
			Shadow:         b.boolean(fs["shadow_mode"]),
			QuotaMode:      b.boolean(fs["quota_mode"]),
			DetailedMetric: b.boolean(fs["detailed_metric"]),
			File:           b.walker.file,
			Line:           item.Line,
			keys:           keysHere,
		}
		b.boolean(fs["value_to_metric"]) // envoy's per-value statistics: no effect here
		if slices.ContainsFunc(here, func(s string) bool { return s != "" }) {
			r.SharedValues = slices.Clone(here)
		}
		single, multi := b.mapping(fs["rate_limit"]), fs["rate_limits"]
		if multi != nil && b.isNull(multi.v) {
			multi = nil
		}
		switch {
		case single != nil && multi != nil:
			b.errorf(multi.k, multi.path, "give rate_limit or rate_limits, not both")
		case single != nil:
			if b.single(single, fs["rate_limit"].path, r) {
				n.rule = r
			}
		case multi != nil:
			if b.multi(multi, r) {
				n.rule = r
			}
		}
		b.descriptors(n, fs["descriptors"], name, keysHere, here, depth+1)
		if attach {
			parent.children[composite] = n
			if strings.HasSuffix(composite, "*") {
				parent.wildcards = append(parent.wildcards, composite)
			}
		}
	}
}

// isNull reports whether n is a null scalar.
func (b *builder) isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && resolve(n).kind == kindNull
}
