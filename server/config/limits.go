package config

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/catalog"
	"github.com/ratekeeper/ratekeeper/driver"
	"go.yaml.in/yaml/v3"
)

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
				if _, valid := UnitPeriod(strings.ToUpper(unit)); valid {
					b.errorf(f.v, f.path, "should not specify rate limit unit when unlimited")
				} else if unit != "" {
					b.warnf(f.v, f.path, "ignored: the rule is unlimited")
				}
			}
		}
		for _, k := range []string{"algorithm", "burst", "period", "count_over_limit", "refunds", "lease", "calendar", "time_zone"} {
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
	r.CountOverLimit = b.boolean(fs["count_over_limit"])
	r.Refunds = b.boolean(fs["refunds"])
	l, ok := b.limit(m, fs, path, false)
	if !ok || len(b.errs) != errs {
		return false
	}
	r.Limits = []Limit{l}
	r.policy = l.Policy
	if f := fs["lease"]; f != nil {
		r.Lease = b.lease(f, l.Policy)
	}
	return len(b.errs) == errs
}

// lease reads a rate_limit's lease, {ttl: 50ms}, for a rule of policy p:
// its TTL, or 0 after an error.
func (b *builder) lease(f *field, p ratekeeper.Policy) time.Duration {
	m := b.mapping(f)
	if m == nil {
		return 0
	}
	fs := b.fields(m, f.path, leaseKeys, true)
	tf := fs["ttl"]
	if tf == nil {
		b.errorf(m, join(f.path, "ttl"), "is missing: a lease lasts 1ms to %v, such as {ttl: 50ms}", ratekeeper.MaxLeaseTTL)
		return 0
	}
	text, ok := b.str(tf)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(text)
	switch {
	case err != nil:
		b.errorf(tf.v, tf.path, "'%s' is not a duration such as 50ms", text)
		return 0
	case d < time.Millisecond || d > ratekeeper.MaxLeaseTTL:
		b.errorf(tf.v, tf.path, "%s is outside 1ms to %v", text, ratekeeper.MaxLeaseTTL)
		return 0
	}
	if p == nil {
		b.errorf(f.k, f.path, "a limit of 0 takes no lease: it denies every request")
		return 0
	}
	if why := LeaseRefused(p); why != "" {
		b.errorf(f.k, f.path, "%s", why)
		return 0
	}
	return d
}

// LeaseRefused says why a rule of policy p takes no leases, or "" if it
// takes them.
func LeaseRefused(p ratekeeper.Policy) string {
	if p == nil {
		return "a limit of 0 takes no lease"
	}
	spec, err := p.Spec()
	if err != nil {
		return err.Error()
	}
	v, err := driver.Validate(spec)
	if err != nil {
		return err.Error()
	}
	if !v.Leases() {
		return fmt.Sprintf("the %s algorithm takes no leases", spec.Algorithm)
	}
	return ""
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
		// The limits are decided as one: they count over the limit
		// together, or not at all, and so take refunds.
		b.together("count_over_limit", fs, item, p, f.path, i, &r.CountOverLimit)
		b.together("refunds", fs, item, p, f.path, i, &r.Refunds)
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

// together reads the boolean key of item, the i-th limit (at path p) of
// the rate_limits list at list: the first limit's value is *v, and every
// other limit must give the same, since a descriptor's limits are decided
// as one.
func (b *builder) together(key string, fs map[string]*field, item *yaml.Node, p, list string, i int, v *bool) {
	got := b.boolean(fs[key])
	if i == 0 {
		*v = got
		return
	}
	if got != *v {
		at := item
		if f := fs[key]; f != nil {
			at = f.v
		}
		b.errorf(at, join(p, key), "%s is %t here and %t on %s[0]: a descriptor's limits are decided together, so give it on every limit or on none",
			key, got, *v, list)
	}
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
			if d, valid := UnitPeriod(up); valid {
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
			if _, known := catalog.Lookup(a); !known {
				b.errorf(f.v, f.path, "unknown algorithm '%s': one of %s", a, algorithmNames(false))
			}
			l.Algorithm = a
		}
	}
	alg, known := catalog.Lookup(l.Algorithm)
	if f := fs["burst"]; f != nil {
		burst, ok := b.integer(f, 1, ratekeeper.MaxLimit)
		// An unknown algorithm has its error already: whether it bursts
		// is not known.
		if ok && (known || l.Algorithm == "") && !alg.Bursts() {
			b.errorf(f.k, f.path, "burst is the capacity of algorithm %s; a window of %s has none",
				algorithmNames(true), cmp.Or(l.Algorithm, "envoy's fixed window"))
		}
		l.Burst = burst
	}
	b.calendar(fs, &l)
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
	if l.Burst == 0 && alg.Bursts() {
		l.Burst = int64(l.RequestsPerUnit)
	}
	if l.RequestsPerUnit == 0 {
		return l, true // envoy denies every request: no policy decides that
	}
	l.Policy = policy(l)
	if err := validate(l.Policy); err != nil {
		at, p := m, path
		if k := policyField(l, errField(err), fs); k != "" {
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

// calendarUnits are the units of a calendar window, by envoy's names.
var calendarUnits = map[string]driver.Period{
	"DAY": ratekeeper.Day, "WEEK": ratekeeper.Week, "MONTH": ratekeeper.Month, "YEAR": ratekeeper.Year,
}

// calendar reads a limit's calendar: true and time_zone into l, whose
// unit, period and algorithm are read: calendar periods in the zone (UTC
// by default) in place of envoy's fixed lengths (a MONTH of 30 days).
func (b *builder) calendar(fs map[string]*field, l *Limit) {
	calF, zoneF := fs["calendar"], fs["time_zone"]
	if calF == nil || !b.boolean(calF) {
		if zoneF != nil {
			b.errorf(zoneF.k, zoneF.path, "a time zone is for calendar periods: set calendar: true with a unit of day, week, month or year")
		}
		return
	}
	period, ok := calendarUnits[l.Unit]
	switch {
	case fs["period"] != nil:
		b.errorf(calF.k, calF.path, "a calendar window's period is its unit: give unit day, week, month or year, not a period")
		return
	case !ok && l.Unit != "":
		b.errorf(calF.k, calF.path, "calendar periods are days, weeks, months and years: unit %s has none", strings.ToLower(l.Unit))
		return
	case l.Algorithm != "" && l.Algorithm != driver.AlgorithmFixedWindow:
		b.errorf(calF.k, calF.path, "a calendar window is a fixed window: algorithm %s takes no calendar", l.Algorithm)
		return
	}
	l.Calendar = period
	if zoneF != nil {
		if name, ok := b.str(zoneF); ok {
			loc, err := time.LoadLocation(name)
			if err != nil || name == "" || name == "Local" {
				b.errorf(zoneF.v, zoneF.path, "unknown time zone '%s': an IANA name such as Europe/Berlin, America/New_York or UTC", name)
				return
			}
			l.Location = loc
		}
	}
}
