package server

import (
	"fmt"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
	"github.com/ratekeeper/ratekeeper/server/config"
)

// rule is a configured rule prepared for the hot path: what the decisions
// need that the configuration does not hold as it is.
type rule struct {
	cfg *config.Rule // the configured rule; for an override, one made for it
	// shadow: decided and counted, but never over the limit: the rule's
	// shadow_mode, or the service's Options.Shadow.
	shadow bool
	// block: a limit of 0 requests, which denies every request with hits.
	block    bool
	override bool // made from a request's limit override
	spec     *driver.ValidSpec
	// first is the current_limit of its (first) limit; limits, for a rule
	// of several, each one's by name, so that the binding one is reported.
	first  *rlsv3.RateLimitResponse_RateLimit
	limits map[string]*rlsv3.RateLimitResponse_RateLimit
	// quotas are, by each of its current_limits, what its policy holds:
	// the capacity (a bucket's burst, a window's limit) and the window
	// over which it is granted, which current_limit cannot carry.
	quotas map[*rlsv3.RateLimitResponse_RateLimit]quota
	// fields are, by each of its current_limits, its name and policy as
	// the RateLimit fields write them (with Options.ResponseHeaders).
	fields map[*rlsv3.RateLimitResponse_RateLimit]limitFields
	// aligned: its window is aligned to the clock, as envoy's are, and
	// resets at the end of the current period whatever the state holds.
	aligned time.Duration
	metrics *ruleMetrics
	// lim makes the rule's Results of the store's Decisions; nil for a
	// rule without a policy (unlimited, or a limit of 0). With leased,
	// it also decides the descriptor's takes from leases.
	lim    *ratekeeper.Limiter
	leased bool
}

// enforced reports whether the rule denies a request on its own: it is
// in neither shadow nor quota mode.
func (r *rule) enforced() bool { return !r.shadow && !r.cfg.QuotaMode }

// replaceable reports whether replaces can name the rule: only rate_limit
// names can be replaced, as in envoy.
func (r *rule) replaceable(replaced map[string]bool) bool {
	return r.cfg.ExplicitName && !r.override && replaced[r.cfg.Name]
}

// compile prepares a configured rule, counted under the labels l gives it.
func (s *Service) compile(r *config.Rule, l *labelling) (*rule, error) {
	c := &rule{cfg: r, shadow: r.Shadow || s.opts.Shadow, block: r.BlocksAll(),
		metrics: l.rule(r.Domain, r.Name)}
	if r.Unlimited {
		return c, nil
	}
	if len(r.Limits) == 1 {
		l := r.Limits[0]
		c.first = currentLimit(r, l)
		c.aligned = alignedPeriod(l)
	} else {
		// An All's Results name their binding policy: report its limit.
		c.limits = make(map[string]*rlsv3.RateLimitResponse_RateLimit, len(r.Limits))
		for i, l := range r.Limits {
			limit := currentLimit(r, l)
			limit.Name = l.Name
			c.limits[l.Name] = limit
			if i == 0 {
				c.first = limit
			}
		}
	}
	if !c.block {
		ttl := r.Lease
		if ttl == 0 && s.opts.Leases > 0 && config.LeaseRefused(r.Policy()) == "" {
			ttl = s.opts.Leases
		}
		var opts []ratekeeper.Option
		if ttl > 0 {
			opts = append(opts, ratekeeper.WithLeases(ratekeeper.Leases{TTL: ttl}))
		}
		lim, err := ratekeeper.New(s.store, r.Policy(), opts...)
		if err != nil {
			return nil, fmt.Errorf("server: rule %s in domain %s: %w", r.Name, r.Domain, err)
		}
		c.spec, c.lim, c.leased = lim.Spec(), lim, ttl > 0
		c.setQuotas()
	}
	s.setFields(c)
	return c, nil
}

// quota is a limit's capacity and the window over which it is granted
// (for a bucket, the time to fill it from empty).
type quota struct {
	capacity int64
	window   time.Duration
}

// setQuotas reads each limit's quota from the rule's spec.
func (r *rule) setQuotas() {
	parts := r.spec.Policies()
	r.quotas = make(map[*rlsv3.RateLimitResponse_RateLimit]quota, len(parts))
	if len(parts) == 1 {
		r.quotas[r.first] = quota{parts[0].Limit(), parts[0].Window()}
		return
	}
	for _, p := range parts {
		if l, ok := r.limits[p.Name()]; ok {
			r.quotas[l] = quota{p.Limit(), p.Window()}
		}
	}
}

// quotaOf is the quota of l, one of the rule's current_limits: a limit of
// 0 (no spec) has none, and is its requests per unit and unit.
func (r *rule) quotaOf(l *rlsv3.RateLimitResponse_RateLimit) quota {
	if q, ok := r.quotas[l]; ok {
		return q
	}
	return quota{int64(l.GetRequestsPerUnit()), limitPeriod(l)}
}

// limitFields are a current_limit's name and RateLimit-Policy item.
type limitFields struct {
	name   ratelimitfield.Name
	policy string
}

// setFields writes, once per rule, the name and policy of each of its
// current_limits that the RateLimit fields show: its limit's name, else
// the rule's.
func (s *Service) setFields(r *rule) {
	if !s.opts.ResponseHeaders {
		return
	}
	r.fields = make(map[*rlsv3.RateLimitResponse_RateLimit]limitFields, max(1, len(r.limits)))
	r.fields[r.first] = r.writeFields(r.first)
	for _, l := range r.limits {
		r.fields[l] = r.writeFields(l)
	}
}

// fieldsOf is the name and policy of l, one of r's current_limits: as
// setFields wrote them, else written now. r may be nil, for a limit of
// no rule, named by the limit alone.
func (r *rule) fieldsOf(l *rlsv3.RateLimitResponse_RateLimit) limitFields {
	if r != nil {
		if f, ok := r.fields[l]; ok {
			return f
		}
	}
	return r.writeFields(l)
}

func (r *rule) writeFields(l *rlsv3.RateLimitResponse_RateLimit) limitFields {
	name := l.GetName()
	q := quota{int64(l.GetRequestsPerUnit()), limitPeriod(l)}
	if r != nil {
		if name == "" {
			name = r.cfg.Name
		}
		q = r.quotaOf(l)
	}
	n := ratelimitfield.NewName(name)
	return limitFields{n, ratelimitfield.Policy(n, q.capacity, q.window)}
}

// currentLimit is a limit as the response reports it: its requests per
// unit and unit, or for a period of any length, the largest unit that
// divides it and a multiplier.
func currentLimit(r *config.Rule, l config.Limit) *rlsv3.RateLimitResponse_RateLimit {
	out := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: l.RequestsPerUnit}
	if r.ExplicitName {
		out.Name = r.Name // as envoy: a rate_limit.name, or none
	}
	if u, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[l.Unit]; ok && l.Unit != "" {
		out.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
		return out
	}
	unit, mult := config.PeriodUnit(l.Period)
	out.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[unit])
	if mult != 1 {
		out.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return out
}

// alignedPeriod is the period of an envoy-style limit (a fixed window
// aligned to its unit, or a limit of 0, which envoy counts in the same
// windows), or 0 for a limit of one of ratekeeper's algorithms.
func alignedPeriod(l config.Limit) time.Duration {
	if l.Algorithm == "" || l.RequestsPerUnit == 0 {
		return l.Period
	}
	return 0
}

// limitPeriod is the period of a response's limit: its unit times its
// multiplier; 0 for an unknown unit.
func limitPeriod(l *rlsv3.RateLimitResponse_RateLimit) time.Duration {
	mult := time.Duration(1)
	if m := l.GetUnitMultiplier(); m != nil {
		mult = time.Duration(max(m.GetValue(), 1))
	}
	return unitPeriod(l.GetUnit()) * mult
}

// unitPeriod is the length of an envoy unit, as envoy counts it; 0 for
// UNKNOWN.
func unitPeriod(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	d, _ := config.UnitPeriod(u.String())
	return d
}

// maxOverrides bounds the cache of override rules; beyond it, overrides
// are prepared for each request.
const maxOverrides = 4096

// maxPeriodText is ratekeeper.MaxPeriod in words.
const maxPeriodText = "10 years (3,650 days)"

var keyEscaper = strings.NewReplacer("%", "%25", "/", "%2F", "=", "%3D", "#", "%23")
