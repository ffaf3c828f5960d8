package config

import (
	"fmt"
	"strconv"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// FromXDS builds the configuration that an xDS management server pushed:
// one domain per RateLimitConfig resource, in the order given. Each
// resource is read as envoyproxy/ratelimit reads it, as if it were the
// YAML file it stands for, so a push is validated like a file and means
// what the file would mean. The error lists every problem found, each an
// *Error whose File names the resource (RateLimitConfig "name") and whose
// Field is the path of the field at fault, such as
// descriptors[1].rate_limit.unit; Line is 0.
//
// The resources are not written as YAML text: each is turned into the
// nodes its file would parse to, and those are read by the same code as a
// file's, so a push costs about the memory of the file it stands for.
//
// A RateLimitConfig carries envoy's fields only: the extensions of the
// YAML (algorithm, burst, period, rate_limits) cannot be pushed. No
// resource at all is a valid, empty configuration.
func FromXDS(resources []*rlsconfv3.RateLimitConfig) (*Config, error) {
	docs := make([]*parsed, len(resources))
	for i, res := range resources {
		name := resourceName(res.GetName())
		if res == nil {
			docs[i] = &parsed{name: name, errs: []error{&Error{File: name, Msg: fmt.Sprintf("resource %d is empty", i)}}}
			continue
		}
		doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{xdsDocument(res)}}
		docs[i] = parseDocument(name, doc)
	}
	return assemble(docs)
}

// resourceName is how errors name a resource: as Error.File.
func resourceName(name string) string { return "RateLimitConfig " + strconv.Quote(name) }

// xdsDocument is resource as the nodes of the YAML document
// envoyproxy/ratelimit turns it into (its ConfigXdsProtoToYaml). Fields at
// their proto default are left out where envoy's loader treats an absent
// key and a zero value alike, so that they raise no warning; strings are
// quoted, so that they are read as strings whatever they hold.
func xdsDocument(res *rlsconfv3.RateLimitConfig) *yaml.Node {
	root := mapping()
	addStr(root, "domain", res.GetDomain())
	if ds := res.GetDescriptors(); len(ds) > 0 {
		add(root, "descriptors", xdsDescriptors(ds))
	}
	return root
}

func xdsDescriptors(ds []*rlsconfv3.RateLimitDescriptor) *yaml.Node {
	list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range ds {
		m := mapping()
		addStr(m, "key", d.GetKey())
		if d.GetValue() != "" {
			addStr(m, "value", d.GetValue())
		}
		if p := d.GetRateLimit(); p != nil {
			add(m, "rate_limit", xdsPolicy(p))
		}
		if d.GetShadowMode() {
			add(m, "shadow_mode", boolean(true))
		}
		if d.GetDetailedMetric() {
			add(m, "detailed_metric", boolean(true))
		}
		if sub := d.GetDescriptors(); len(sub) > 0 {
			add(m, "descriptors", xdsDescriptors(sub))
		}
		list.Content = append(list.Content, m)
	}
	return list
}

// xdsPolicy is a rate_limit. An unlimited policy's unit and
// requests_per_unit are written only when set, as envoy rejects the one
// and ignores the other; a limited one's are always written, so that an
// unset unit is envoy's error: invalid rate limit unit 'UNKNOWN'.
func xdsPolicy(p *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping()
	unset := p.GetUnit() == rlsconfv3.RateLimitUnit_UNKNOWN
	if !p.GetUnlimited() || !unset {
		addStr(m, "unit", p.GetUnit().String())
	}
	if !p.GetUnlimited() || p.GetRequestsPerUnit() != 0 {
		add(m, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(p.GetRequestsPerUnit()), 10)})
	}
	if p.GetUnlimited() {
		add(m, "unlimited", boolean(true))
	}
	if p.GetName() != "" {
		addStr(m, "name", p.GetName())
	}
	if rs := p.GetReplaces(); len(rs) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, r := range rs {
			e := mapping()
			addStr(e, "name", r.GetName())
			list.Content = append(list.Content, e)
		}
		add(m, "replaces", list)
	}
	return m
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

func addStr(m *yaml.Node, key, value string) {
	add(m, key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: value})
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}
