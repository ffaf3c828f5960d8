package envoydiff

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The units the tests use: one window of either spans a test, and
// inOneWindow retries a run that crossed the top of an hour.
const (
	hour = rlsv3.RateLimitResponse_RateLimit_HOUR
	day  = rlsv3.RateLimitResponse_RateLimit_DAY
)

type unit = rlsv3.RateLimitResponse_RateLimit_Unit

// seconds returns the length of u's window, as envoy's UnitToDivider.
func seconds(u unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case hour:
		return 3600
	case day:
		return 86400
	}
	panic("envoydiff: a unit the tests do not use: " + u.String())
}

// rule is one descriptor of the configuration, in envoy's YAML and in the
// models alike, so that the two cannot drift apart.
type rule struct {
	key, value string
	// unit is UNKNOWN for a descriptor without a rate_limit.
	unit      unit
	rpu       uint32
	unlimited bool
	shadow    bool
	name      string
	replaces  []string
	children  []*rule
}

// hasLimit reports whether r has a rate_limit (unlimited or not).
func (r *rule) hasLimit() bool {
	return r.unlimited || r.unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

// mapKey is r's key in envoy's table of one level: "key" or "key_value".
func (r *rule) mapKey() string {
	if r.value == "" {
		return r.key
	}
	return r.key + "_" + r.value
}

// yamlConfig returns the YAML of a configuration of domain.
func yamlConfig(domain string, rules []*rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", strconv.Quote(domain))
	writeRules(&b, rules, "  ")
	return b.String()
}

func writeRules(b *strings.Builder, rules []*rule, indent string) {
	for _, r := range rules {
		fmt.Fprintf(b, "%s- key: %s\n", indent, strconv.Quote(r.key))
		in := indent + "  "
		if r.value != "" {
			fmt.Fprintf(b, "%svalue: %s\n", in, strconv.Quote(r.value))
		}
		if r.shadow {
			fmt.Fprintf(b, "%sshadow_mode: true\n", in)
		}
		switch {
		case r.unlimited:
			fmt.Fprintf(b, "%srate_limit:\n%s  unlimited: true\n", in, in)
		case r.hasLimit():
			fmt.Fprintf(b, "%srate_limit:\n%s  unit: %s\n%s  requests_per_unit: %d\n",
				in, in, strings.ToLower(r.unit.String()), in, r.rpu)
			if r.name != "" {
				fmt.Fprintf(b, "%s  name: %s\n", in, strconv.Quote(r.name))
			}
			if len(r.replaces) > 0 {
				fmt.Fprintf(b, "%s  replaces:\n", in)
				for _, name := range r.replaces {
					fmt.Fprintf(b, "%s    - name: %s\n", in, strconv.Quote(name))
				}
			}
		}
		if len(r.children) > 0 {
			fmt.Fprintf(b, "%sdescriptors:\n", in)
			writeRules(b, r.children, in+"  ")
		}
	}
}

// lookup finds the rule of a descriptor's entries as envoy's GetLimit
// does: at each level the exact key_value, else the first wildcard (in
// the file's order) whose prefix matches, else the key alone, with no
// going back; the rule applies only if the entries end on it.
func lookup(rules []*rule, entries []*rlcommon.RateLimitDescriptor_Entry) *rule {
	level := rules
	for i, e := range entries {
		n := match(level, e)
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			if n.hasLimit() {
				return n
			}
			return nil
		}
		if len(n.children) == 0 {
			return nil
		}
		level = n.children
	}
	return nil
}

func match(level []*rule, e *rlcommon.RateLimitDescriptor_Entry) *rule {
	kv := e.GetKey() + "_" + e.GetValue()
	for _, r := range level {
		if r.mapKey() == kv {
			return r
		}
	}
	for _, r := range level {
		if k := r.mapKey(); strings.HasSuffix(k, "*") && strings.HasPrefix(kv, strings.TrimSuffix(k, "*")) {
			return r
		}
	}
	for _, r := range level {
		if r.mapKey() == e.GetKey() {
			return r
		}
	}
	return nil
}

// applied is how one descriptor of a request is decided.
type applied struct {
	rule      *rule // nil: no limit
	override  bool  // rule comes from the descriptor's limit override
	unlimited bool
	hits      uint64
}

// resolve applies a configuration to a request as envoy's service does:
// an unknown domain limits nothing; an override replaces the
// configuration's rule; replaces drops the rules named by another matched
// rule; unlimited rules answer OK without counting.
func resolve(domains map[string][]*rule, req *rlsv3.RateLimitRequest) []applied {
	ds := make([]applied, len(req.GetDescriptors()))
	rules, known := domains[req.GetDomain()]
	replaced := map[string]bool{}
	for i, d := range req.GetDescriptors() {
		// A descriptor's own hits_addend, even 0, else the request's,
		// where 0 means 1.
		ds[i].hits = max(1, uint64(req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			ds[i].hits = h.GetValue()
		}
		if !known {
			continue
		}
		if o := d.GetLimit(); o != nil {
			ds[i].rule = &rule{unit: unit(o.GetUnit()), rpu: o.GetRequestsPerUnit()}
			ds[i].override = true
			continue
		}
		r := lookup(rules, d.GetEntries())
		if r == nil {
			continue
		}
		for _, name := range r.replaces {
			replaced[name] = true
		}
		if r.unlimited {
			ds[i].unlimited = true
			continue
		}
		ds[i].rule = r
	}
	for i := range ds {
		if r := ds[i].rule; r != nil && r.name != "" && replaced[r.name] {
			ds[i].rule = nil
		}
	}
	return ds
}

// entriesKey spells a descriptor's entries.
func entriesKey(d *rlcommon.RateLimitDescriptor) string {
	var b strings.Builder
	for _, e := range d.GetEntries() {
		fmt.Fprintf(&b, "%q=%q;", e.GetKey(), e.GetValue())
	}
	return b.String()
}

// resetMarker stands, in a model's answer, for "a duration_until_reset
// to the end of the current window of the status's unit"; compare checks
// it against the clock.
var resetMarker = &durationpb.Duration{Seconds: -1}

// limitStatus is the status of a limited descriptor.
func limitStatus(r *rule, code rlsv3.RateLimitResponse_Code, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: r.rpu, Unit: r.unit, Name: r.name},
		LimitRemaining:     remaining,
		DurationUntilReset: resetMarker,
	}
}

// otherStatus is the status of a descriptor that no limit counts.
func otherStatus(a applied) *rlsv3.RateLimitResponse_DescriptorStatus {
	if a.unlimited {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
}

// envoyModel predicts envoyproxy/ratelimit's answers within one window,
// from its source (src/redis/fixed_cache_impl.go, src/limiter): each
// limited descriptor adds its hits to its counter (INCRBY), denied or
// not, and is over the limit when the counter then exceeds the limit.
// The counter is keyed by the descriptor's entries and the unit, not by
// the limit, so an override shares it with the rule it overrides.
type envoyModel struct {
	domains map[string][]*rule
	counts  map[string]uint64
	// zeroLooksOK answers a look (hits 0) at a limit of 0 OK, as
	// ratekeeper-server does in envoy's environment: it keeps no counter
	// for such a limit, where envoy's is past 0 once it was hit.
	zeroLooksOK bool
}

func newEnvoyModel(domains map[string][]*rule) *envoyModel {
	return &envoyModel{domains: domains, counts: map[string]uint64{}}
}

func (m *envoyModel) apply(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for i, a := range resolve(m.domains, req) {
		if a.rule == nil {
			resp.Statuses = append(resp.Statuses, otherStatus(a))
			continue
		}
		key := req.GetDomain() + "|" + entriesKey(req.GetDescriptors()[i]) + "|" + a.rule.unit.String()
		m.counts[key] += a.hits
		after := m.counts[key]
		if m.zeroLooksOK && a.rule.rpu == 0 && a.hits == 0 {
			after = 0
		}
		if after > uint64(a.rule.rpu) {
			code := rlsv3.RateLimitResponse_OVER_LIMIT
			if a.rule.shadow {
				code = rlsv3.RateLimitResponse_OK
			} else {
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			resp.Statuses = append(resp.Statuses, limitStatus(a.rule, code, 0))
			continue
		}
		resp.Statuses = append(resp.Statuses, limitStatus(a.rule, rlsv3.RateLimitResponse_OK, a.rule.rpu-uint32(after)))
	}
	return resp
}

// ratekeeperModel predicts ratekeeper-server's answers within one window:
// envoy's matching and hits, but a request's enforced descriptors
// (requests_per_unit 0 among them) are decided all or nothing, so a
// denied request takes nothing from any of them; its shadow-mode
// descriptors are decided likewise, apart, so that a rule being tried out
// never changes what the enforced ones take. The counter of an override
// is keyed by its value.
type ratekeeperModel struct {
	domains map[string][]*rule
	counts  map[string]uint64
}

func newRatekeeperModel(domains map[string][]*rule) *ratekeeperModel {
	return &ratekeeperModel{domains: domains, counts: map[string]uint64{}}
}

func (m *ratekeeperModel) apply(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors())),
	}
	ds := resolve(m.domains, req)
	keys := make([]string, len(ds))
	var enforced, shadow []int
	for i, a := range ds {
		switch {
		case a.rule == nil:
			resp.Statuses[i] = otherStatus(a)
			continue
		case a.rule.shadow:
			shadow = append(shadow, i)
		default:
			enforced = append(enforced, i)
		}
		keys[i] = req.GetDomain() + "|" + entriesKey(req.GetDescriptors()[i]) + "|" + a.rule.unit.String()
		if a.override {
			keys[i] += fmt.Sprintf("|override %d", a.rule.rpu)
		}
	}
	if m.decide(ds, keys, enforced, resp) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	m.decide(ds, keys, shadow, resp)
	return resp
}

// decide decides the descriptors idx all or nothing, fills in their
// statuses, and reports whether they were denied.
//
// Each status's limit_remaining is what its counter has left once the
// descriptors before it in the request have been counted: after the hits
// when allowed, and, since a denial takes nothing, before them when
// denied, OVER_LIMIT included (where envoy, whose counter went over,
// answers 0). A cost above a limit is denied without counting anything,
// so there the descriptors before it do not count either.
func (m *ratekeeperModel) decide(ds []applied, keys []string, idx []int, resp *rlsv3.RateLimitResponse) bool {
	pending := map[string]uint64{}
	before := map[int]uint64{} // hits of the same key earlier in the request
	over := map[int]bool{}
	overCost := false
	for _, i := range idx {
		before[i] = pending[keys[i]]
		pending[keys[i]] += ds[i].hits
		if m.counts[keys[i]]+pending[keys[i]] > uint64(ds[i].rule.rpu) {
			over[i] = true
		}
		if ds[i].hits > uint64(ds[i].rule.rpu) {
			overCost = true
		}
	}
	denied := len(over) > 0
	for _, i := range idx {
		r := ds[i].rule
		used := m.counts[keys[i]]
		if !overCost {
			used += before[i]
		}
		code := rlsv3.RateLimitResponse_OK
		switch {
		case !denied:
			used += ds[i].hits
		case over[i] && !r.shadow:
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		resp.Statuses[i] = limitStatus(r, code, r.rpu-uint32(min(used, uint64(r.rpu))))
	}
	if !denied {
		for k, n := range pending {
			m.counts[k] += n
		}
	}
	return denied
}
