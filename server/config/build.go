package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"go.yaml.in/yaml/v3"
)

// units are envoy's rate limit units (the RateLimitResponse.RateLimit.Unit
// enum, read upper-cased as envoy reads it) and their lengths, as envoy
// counts them: a month is 30 days and a year 365.
var units = map[string]time.Duration{
	"SECOND": time.Second,
	"MINUTE": time.Minute,
	"HOUR":   time.Hour,
	"DAY":    24 * time.Hour,
	"WEEK":   7 * 24 * time.Hour,
	"MONTH":  30 * 24 * time.Hour,
	"YEAR":   365 * 24 * time.Hour,
}

// algorithms are the algorithm names a rate_limit may choose.
var algorithms = []string{
	driver.AlgorithmTokenBucket, driver.AlgorithmGCRA, driver.AlgorithmLeakyBucket,
	driver.AlgorithmFixedWindow, driver.AlgorithmSlidingWindowCounter, driver.AlgorithmSlidingWindowLog,
}

// buckets are the algorithms that take a burst.
var buckets = []string{driver.AlgorithmTokenBucket, driver.AlgorithmGCRA, driver.AlgorithmLeakyBucket}

// build validates the files and builds their Config, or returns every
// problem found.
func build(files []file) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	var errs []error
	first := map[string]string{} // domain -> where it was defined
	for _, f := range files {
		c.files = append(c.files, f.name)
		p := parseFile(f)
		errs = append(errs, p.errs...)
		c.warnings = append(c.warnings, p.warnings...)
		if p.domain == "" {
			continue
		}
		where := fmt.Sprintf("%s:%d", f.name, line(p.domainNode))
		if prev, dup := first[p.domain]; dup {
			errs = append(errs, &Error{File: f.name, Line: line(p.domainNode), Field: "domain",
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
	domain     string
	domainNode *yaml.Node
	root       *node
	errs       []error
	warnings   []error
}

// yamlLine finds the line in a yaml error message.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseFile reads and validates one file.
func parseFile(f file) parsed {
	w := &walker{file: f.name, budget: maxNodes}
	var doc yaml.Node
	if err := yaml.Unmarshal(f.data, &doc); err != nil {
		e := &Error{File: f.name, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = "invalid YAML: " + m[2]
		}
		return parsed{errs: []error{e}}
	}
	b := &builder{walker: w}
	root := b.document(&doc)
	return parsed{domain: b.domain, domainNode: b.domainNode, root: root, errs: w.errs, warnings: w.warnings}
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
	b.descriptors(root, fs["descriptors"], "", nil, nil)
	return root
}

// descriptors reads a list of descriptors into parent, whose rule name is
// namePath ("" for the domain), whose levels have the keys keys and share
// the counters of shared (see Rule.SharedValues).
func (b *builder) descriptors(parent *node, list *field, namePath string, keys, shared []string) {
	items := b.list(list)
	for i, item := range items {
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
		b.descriptors(n, fs["descriptors"], name, keysHere, here)
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

// single reads a rate_limit into r.
func (b *builder) single(m *yaml.Node, path string, r *Rule) bool {
	errs := len(b.errs)
	fs := b.fields(m, path, rateLimitKeys, false)
	name, _ := b.str(fs["name"])
	if name != "" {
		r.Name, r.ExplicitName = name, true
	}
	for i, item := range b.list(fs["replaces"]) {
		p := fmt.Sprintf("%s[%d]", fs["replaces"].path, i)
		rfs := b.fields(item, p, replacesKeys, false)
		rname, ok := b.str(rfs["name"])
		switch {
		case !ok:
		case rname == "":
			b.errorf(item, join(p, "name"), "should not have an empty replaces entry")
		case rname == name:
			b.errorf(rfs["name"].v, join(p, "name"), "replaces should not contain name of same descriptor")
		default:
			r.Replaces = append(r.Replaces, rname)
		}
	}
	if b.boolean(fs["unlimited"]) {
		r.Unlimited = true
		if f := fs["unit"]; f != nil {
			if unit, ok := b.str(f); ok {
				if _, valid := units[strings.ToUpper(unit)]; valid {
					b.errorf(f.v, f.path, "should not specify rate limit unit when unlimited")
				} else if unit != "" {
					b.warnf(f.v, f.path, "ignored: the rule is unlimited")
				}
			}
		}
		for _, k := range []string{"algorithm", "burst", "period"} {
			if f := fs[k]; f != nil {
				b.errorf(f.k, f.path, "an unlimited rule takes no %s", k)
			}
		}
		if f := fs["requests_per_unit"]; f != nil {
			if _, ok := b.integer(f, 0, math.MaxUint32); ok {
				b.warnf(f.k, f.path, "ignored: the rule is unlimited")
			}
		}
		return len(b.errs) == errs
	}
	l, ok := b.limit(m, fs, path, false)
	if !ok || len(b.errs) != errs {
		return false
	}
	r.Limits = []Limit{l}
	r.policy = l.Policy
	return true
}

// multi reads a rate_limits list into r.
func (b *builder) multi(f *field, r *Rule) bool {
	errs := len(b.errs)
	items := b.list(f)
	if len(b.errs) != errs {
		return false
	}
	if len(items) == 0 || len(items) > driver.MaxParts {
		b.errorf(f.v, f.path, "holds 1 to %d limits, not %d", driver.MaxParts, len(items))
		return false
	}
	names := map[string]string{}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", f.path, i)
		fs := b.fields(item, p, limitKeys, true)
		l, ok := b.limit(item, fs, p, true)
		if !ok {
			continue
		}
		if prev, dup := names[l.Name]; dup {
			at := item
			if nf := fs["name"]; nf != nil {
				at = nf.v
			}
			b.errorf(at, join(p, "name"), "the limit name '%s' is also %s's: give each limit of a descriptor its own name", l.Name, prev)
			continue
		}
		names[l.Name] = p
		r.Limits = append(r.Limits, l)
	}
	if len(b.errs) != errs {
		return false
	}
	parts := make([]ratekeeper.Policy, len(r.Limits))
	for i, l := range r.Limits {
		if l.Policy == nil {
			return true // blocks everything: no policy
		}
		parts[i] = ratekeeper.Named(l.Name, l.Policy)
	}
	p := ratekeeper.All(parts...)
	if err := validate(p); err != nil {
		b.errorf(f.k, f.path, "%s", policyMsg(err))
		return false
	}
	r.policy = p
	return true
}

// limit reads one limit of mapping m, whose fields are fs: from a
// rate_limit, or (named) an element of rate_limits.
func (b *builder) limit(m *yaml.Node, fs map[string]*field, path string, named bool) (Limit, bool) {
	errs := len(b.errs)
	var l Limit
	unitF, periodF := fs["unit"], fs["period"]
	if periodF != nil && b.isNull(periodF.v) {
		periodF = nil
	}
	if periodF != nil {
		if unitF != nil && !b.isNull(unitF.v) {
			b.errorf(periodF.k, periodF.path, "give unit or period, not both")
		}
		if text, ok := b.str(periodF); ok {
			d, err := time.ParseDuration(text)
			switch {
			case err != nil:
				b.errorf(periodF.v, periodF.path, "'%s' is not a duration such as 30s, 5m or 1h30m", text)
			case d <= 0:
				b.errorf(periodF.v, periodF.path, "must be positive, got %s", text)
			}
			l.Period, l.Name = d, text
		}
	} else {
		unit, ok := b.str(unitF)
		if ok {
			up := strings.ToUpper(unit)
			if d, valid := units[up]; valid {
				l.Unit, l.Period, l.Name = up, d, strings.ToLower(up)
			} else {
				at, p := m, join(path, "unit")
				if unitF != nil {
					at = unitF.v
				}
				b.errorf(at, p, "invalid rate limit unit '%s': one of second, minute, hour, day, week, month and year, or a period such as 30s instead", unit)
			}
		}
	}
	rpu, ok := b.integer(fs["requests_per_unit"], 0, math.MaxUint32)
	if ok && rpu > ratekeeper.MaxLimit {
		b.errorf(fs["requests_per_unit"].v, fs["requests_per_unit"].path, "%d is above the largest limit ratekeeper keeps exactly, %d", rpu, int64(ratekeeper.MaxLimit))
	}
	l.RequestsPerUnit = uint32(rpu)
	if f := fs["algorithm"]; f != nil {
		if a, ok := b.str(f); ok {
			if !slices.Contains(algorithms, a) {
				b.errorf(f.v, f.path, "unknown algorithm '%s': one of %s", a, strings.Join(algorithms, ", "))
			}
			l.Algorithm = a
		}
	}
	if f := fs["burst"]; f != nil {
		burst, ok := b.integer(f, 1, ratekeeper.MaxLimit)
		if ok && !slices.Contains(buckets, l.Algorithm) {
			b.errorf(f.k, f.path, "burst is the capacity of algorithm %s; a window of %s has none",
				strings.Join(buckets, ", "), cmp.Or(l.Algorithm, "envoy's fixed window"))
		}
		l.Burst = burst
	}
	if named {
		if f := fs["name"]; f != nil {
			if name, ok := b.str(f); ok && name != "" {
				if why := driver.CheckName(name); why != "" {
					b.errorf(f.v, f.path, "the name %s", why)
				}
				l.Name = name
			}
		}
	}
	if len(b.errs) != errs {
		return l, false
	}
	if l.Burst == 0 && slices.Contains(buckets, l.Algorithm) {
		l.Burst = int64(l.RequestsPerUnit)
	}
	if l.RequestsPerUnit == 0 {
		return l, true // envoy denies every request: no policy decides that
	}
	l.Policy = policy(l)
	if err := validate(l.Policy); err != nil {
		at, p := m, path
		if k := policyField(errField(err), fs); k != "" {
			p = join(path, k)
			if f := fs[k]; f != nil {
				at = f.v
			}
		}
		b.errorf(at, p, "%s", policyMsg(err))
		return l, false
	}
	return l, true
}

// validate checks a policy as ratekeeper.New does.
func validate(p ratekeeper.Policy) error {
	s, err := p.Spec()
	if err == nil {
		_, err = driver.Validate(s)
	}
	return err
}

// errField is the policy field a policy's error is about.
func errField(err error) string {
	var pe *ratekeeper.PolicyError
	var se *driver.SpecError
	switch {
	case errors.As(err, &pe):
		return pe.Field
	case errors.As(err, &se):
		return se.Field
	}
	return ""
}

// policy returns the ratekeeper policy that decides l.
func policy(l Limit) ratekeeper.Policy {
	n := int64(l.RequestsPerUnit)
	switch l.Algorithm {
	case driver.AlgorithmTokenBucket:
		return ratekeeper.TokenBucket{Capacity: l.Burst, RefillRate: float64(n), RefillInterval: l.Period}
	case driver.AlgorithmGCRA:
		return ratekeeper.GCRA{Rate: n, Period: l.Period, Burst: l.Burst}
	case driver.AlgorithmLeakyBucket:
		return ratekeeper.LeakyBucket{Capacity: l.Burst, LeakRate: float64(n) / l.Period.Seconds()}
	case driver.AlgorithmFixedWindow:
		return ratekeeper.FixedWindow{Limit: n, Window: l.Period}
	case driver.AlgorithmSlidingWindowCounter:
		return ratekeeper.SlidingWindowCounter{Limit: n, Window: l.Period}
	case driver.AlgorithmSlidingWindowLog:
		return ratekeeper.SlidingWindowLog{Limit: n, Window: l.Period}
	}
	return ratekeeper.FixedWindow{Limit: n, Window: l.Period, Aligned: true}
}

// policyField returns the YAML key a field of l's policy comes from.
func policyField(field string, fs map[string]*field) string {
	switch field {
	case "Limit", "Rate", "RefillRate", "LeakRate":
		return "requests_per_unit"
	case "Window", "Period", "RefillInterval", "Interval":
		if fs["period"] != nil {
			return "period"
		}
		return "unit"
	case "Burst", "Capacity":
		if fs["burst"] != nil {
			return "burst"
		}
		return "requests_per_unit"
	}
	return ""
}

// policyMsg is the reason of a policy's error, without the ratekeeper
// prefix.
func policyMsg(err error) string {
	var pe *ratekeeper.PolicyError
	var se *driver.SpecError
	switch {
	case errors.As(err, &pe):
		return strings.Join(strings.Fields("ratekeeper."+pe.Policy+" "+pe.Field+" "+pe.Reason), " ")
	case errors.As(err, &se):
		return strings.Join(strings.Fields(se.Algorithm+" "+se.Field+" "+se.Reason), " ")
	}
	return err.Error()
}
