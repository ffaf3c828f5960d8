package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/server/internal/quota"
)

// QuotaBucket is one of a domain's quota_buckets: the rule of the rate
// limit quota service (RLQS) for the bucket ids that hold Match's
// entries, where a value "*" matches any value and gives each value its
// own bucket.
//
//	quota_buckets:
//	  - bucket: {name: global}
//	    rate_limit: {unit: second, requests_per_unit: 10000}
//	  - bucket: {tenant: "*"}
//	    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, burst: 100}
//
// Its limit is a token bucket of RequestsPerUnit per Unit and Burst
// (RequestsPerUnit when absent), the only algorithm Envoy's filter
// enforces.
type QuotaBucket struct {
	Domain          string
	Name            string // rate_limit.name, else the bucket's entries
	Match           []Entry
	RequestsPerUnit int64
	Unit            time.Duration
	Burst           int64
	File            string
	Line            int
}

// Rule is b's limit for the quota package: milliseconds.
func (b *QuotaBucket) Rule() quota.Rule {
	return quota.Rule{Rate: b.RequestsPerUnit, Unit: b.Unit.Milliseconds(), Burst: b.Burst}
}

var (
	quotaBucketKeys = []string{"bucket", "rate_limit"}
	quotaLimitKeys  = []string{"name", "unit", "requests_per_unit", "algorithm", "burst"}
)

// maxQuotaEntries bounds a quota bucket's entries, and maxQuotaBuckets a
// domain's quota buckets.
const (
	maxQuotaEntries = 32
	maxQuotaBuckets = 1024
)

// quotaBuckets reads a domain's quota_buckets.
func (b *builder) quotaBuckets(f *field) []*QuotaBucket {
	var out []*QuotaBucket
	items := b.list(f)
	if len(items) > maxQuotaBuckets {
		b.errorf(f.v, f.path, "%d quota buckets: at most %d", len(items), maxQuotaBuckets)
		return nil
	}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", f.path, i)
		fs := b.fields(item, p, quotaBucketKeys, true)
		q := &QuotaBucket{Domain: b.domain, File: b.walker.file, Line: item.Line}
		ok := true
		if m := b.mapping(fs["bucket"]); m == nil {
			b.errorf(item, join(p, "bucket"), "a quota bucket needs its bucket: the entries of the bucket ids it matches, such as {name: global}")
			ok = false
		} else {
			for j := 0; j+1 < len(m.Content); j += 2 {
				k, v := m.Content[j], m.Content[j+1]
				if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || k.Value == "" {
					b.errorf(k, join(p, "bucket"), "an entry is a non-empty name and a string value")
					ok = false
					continue
				}
				q.Match = append(q.Match, Entry{Key: k.Value, Value: v.Value})
			}
			slices.SortFunc(q.Match, func(a, c Entry) int { return strings.Compare(a.Key, c.Key) })
			switch {
			case len(q.Match) == 0:
				b.errorf(m, join(p, "bucket"), "a quota bucket matches at least one entry")
				ok = false
			case len(q.Match) > maxQuotaEntries:
				b.errorf(m, join(p, "bucket"), "%d entries: at most %d", len(q.Match), maxQuotaEntries)
				ok = false
			}
		}
		rp := join(p, "rate_limit")
		m := b.mapping(fs["rate_limit"])
		if m == nil {
			b.errorf(item, rp, "a quota bucket needs its rate_limit: {unit, requests_per_unit}")
			continue
		}
		ls := b.fields(m, rp, quotaLimitKeys, true)
		q.Name, _ = b.str(ls["name"])
		if unit, _ := b.str(ls["unit"]); unit == "" {
			b.errorf(m, join(rp, "unit"), "a quota bucket needs its unit: second, minute, hour or day")
			ok = false
		} else if d, valid := UnitPeriod(strings.ToUpper(unit)); !valid || d > 24*time.Hour {
			b.errorf(ls["unit"].v, ls["unit"].path, "unit %q: a quota bucket's unit is second, minute, hour or day", unit)
			ok = false
		} else {
			q.Unit = d
		}
		n, valid := b.integer(ls["requests_per_unit"], 1, 1<<29)
		if valid && ls["requests_per_unit"] == nil {
			b.errorf(m, join(rp, "requests_per_unit"), "a quota bucket needs its requests_per_unit")
			valid = false
		}
		ok = ok && valid
		q.RequestsPerUnit = n
		if alg, _ := b.str(ls["algorithm"]); alg != "" && alg != "token_bucket" {
			b.errorf(ls["algorithm"].v, ls["algorithm"].path, "algorithm %q: a quota bucket is a token bucket, the only limit Envoy's filter enforces", alg)
			ok = false
		}
		burst, valid := b.integer(ls["burst"], 1, 1<<53)
		ok = ok && valid
		q.Burst = cmp.Or(burst, q.RequestsPerUnit)
		if !ok {
			continue
		}
		if err := q.Rule().Check(); err != nil {
			b.errorf(m, rp, "%v", err)
			continue
		}
		if q.Name == "" {
			var s []string
			for _, e := range q.Match {
				s = append(s, e.Key+"="+e.Value)
			}
			q.Name = strings.Join(s, ",")
		}
		out = append(out, q)
	}
	return out
}

// QuotaBucket returns the first of domain's quota buckets that matches a
// bucket id, and the key of the id's bucket under it: its name, and the
// values of its "*" entries. Nil when none matches.
func (c *Config) QuotaBucket(domain string, id map[string]string) (*QuotaBucket, string) {
	n := c.domains[domain]
	if n == nil {
		return nil, ""
	}
	for _, q := range n.quota {
		key, ok := q.instance(id)
		if ok {
			return q, key
		}
	}
	return nil, ""
}

// QuotaBuckets returns domain's quota buckets, in the order of its file.
func (c *Config) QuotaBuckets(domain string) []*QuotaBucket {
	if n := c.domains[domain]; n != nil {
		return slices.Clone(n.quota)
	}
	return nil
}

func (q *QuotaBucket) instance(id map[string]string) (string, bool) {
	var key strings.Builder
	key.WriteString(q.Name)
	for _, e := range q.Match {
		v, ok := id[e.Key]
		if !ok || e.Value != "*" && v != e.Value {
			return "", false
		}
		if e.Value == "*" {
			fmt.Fprintf(&key, "|%d:%s", len(v), v)
		}
	}
	return key.String(), true
}
