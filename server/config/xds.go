package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
// YAML (algorithm, burst, period, rate_limits) cannot be pushed, except
// quota buckets, which a descriptor of key QuotaBucketsKey carries. No
// resource at all is a valid, empty configuration.
func FromXDS(resources []*rlsconfv3.RateLimitConfig) (*Config, error) {
	docs := make([]*parsed, len(resources))
	for i, res := range resources {
		name := resourceName(res.GetName())
		if res == nil {
			docs[i] = &parsed{name: name, errs: []error{&Error{File: name, Msg: fmt.Sprintf("resource %d is empty", i)}}}
			continue
		}
		root, fields, misplaced := xdsDocument(res)
		docs[i] = parseDocument(name, &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}})
		for _, errs := range [][]error{docs[i].errs, docs[i].warnings} {
			for _, err := range errs {
				if e, ok := err.(*Error); ok {
					e.Field = fields.proto(e.Field)
				}
			}
		}
		for _, at := range misplaced {
			docs[i].errs = append(docs[i].errs, &Error{File: name, Field: at,
				Msg: fmt.Sprintf("a %s descriptor holds quota buckets below it, and no value or rate_limit of its own", QuotaBucketsKey)})
		}
	}
	return assemble(docs)
}

// QuotaBucketsKey is the key of a RateLimitConfig descriptor that holds
// quota buckets (see QuotaBucket) rather than rules, as the resource has
// no field for them. Each descriptor below it with a rate_limit is a
// quota bucket, whose entries are the keys and values of the path to it;
// a descriptor without a value matches any value, as "*" does in a file:
//
//	descriptors:
//	  - key: ratekeeper.quota_buckets
//	    descriptors:
//	      - key: name
//	        value: global
//	        rate_limit: {unit: SECOND, requests_per_unit: 10000}
//	      - key: tenant
//	        rate_limit: {unit: MINUTE, requests_per_unit: 600}
//
// is the file's
//
//	quota_buckets:
//	  - bucket: {name: global}
//	    rate_limit: {unit: second, requests_per_unit: 10000}
//	  - bucket: {tenant: "*"}
//	    rate_limit: {unit: minute, requests_per_unit: 600}
//
// A RateLimitPolicy has no burst: it is requests_per_unit. envoyproxy/ratelimit,
// given such a resource, reads it as a rule no request names.
const QuotaBucketsKey = "ratekeeper.quota_buckets"

// xdsFields maps the paths of the fields of a resource's document to
// those of the resource, where they differ: its descriptors after a
// QuotaBucketsKey one, and its quota buckets.
type xdsFields map[string]string

// proto is the resource's path of the document's field at path.
func (f xdsFields) proto(path string) string {
	list, rest, ok := strings.Cut(path, "]")
	if !ok {
		return path
	}
	if p, ok := f[list+"]"]; ok {
		return p + rest
	}
	return path
}

// xdsDocument is resource as the nodes of the YAML document
// envoyproxy/ratelimit turns it into (its ConfigXdsProtoToYaml), with
// the quota buckets of its QuotaBucketsKey descriptors, the paths of the
// fields that moved, and those of QuotaBucketsKey descriptors with a value
// or a limit. Fields at their proto default are left out where
// envoy's loader treats an absent key and a zero value alike, so that
// they raise no warning; strings are quoted, so that they are read as
// strings whatever they hold.
func xdsDocument(res *rlsconfv3.RateLimitConfig) (root *yaml.Node, fields xdsFields, misplaced []string) {
	root = mapping()
	addStr(root, "domain", res.GetDomain())
	fields = xdsFields{}
	var rules []*rlsconfv3.RateLimitDescriptor
	buckets := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for i, d := range res.GetDescriptors() {
		at := fmt.Sprintf("descriptors[%d]", i)
		if d.GetKey() != QuotaBucketsKey {
			fields[fmt.Sprintf("descriptors[%d]", len(rules))] = at
			rules = append(rules, d)
			continue
		}
		if d.GetValue() != "" || d.GetRateLimit() != nil {
			misplaced = append(misplaced, at)
		}
		xdsQuotaBuckets(buckets, fields, at, nil, d.GetDescriptors())
	}
	if len(rules) > 0 {
		add(root, "descriptors", xdsDescriptors(rules))
	}
	if len(buckets.Content) > 0 {
		add(root, "quota_buckets", buckets)
	}
	return root, fields, misplaced
}

// xdsQuotaBuckets adds the quota buckets of ds, below the entries of the
// path at, to list.
func xdsQuotaBuckets(list *yaml.Node, fields xdsFields, at string, entries []Entry, ds []*rlsconfv3.RateLimitDescriptor) {
	for i, d := range ds {
		p := fmt.Sprintf("%s.descriptors[%d]", at, i)
		e := Entry{Key: d.GetKey(), Value: cmp.Or(d.GetValue(), "*")}
		path := append(slices.Clip(entries), e)
		if rl := d.GetRateLimit(); rl != nil {
			fields[fmt.Sprintf("quota_buckets[%d]", len(list.Content))] = p
			list.Content = append(list.Content, xdsQuotaBucket(path, rl))
		}
		xdsQuotaBuckets(list, fields, p, path, d.GetDescriptors())
	}
}

// xdsQuotaBucket is a quota bucket of entries and limit p.
func xdsQuotaBucket(entries []Entry, p *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping()
	bucket := mapping()
	for _, e := range entries {
		addStr(bucket, e.Key, e.Value)
	}
	add(m, "bucket", bucket)
	add(m, "rate_limit", xdsPolicy(p))
	return m
}

// resourceName is how errors name a resource: as Error.File.
func resourceName(name string) string { return "RateLimitConfig " + strconv.Quote(name) }

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
