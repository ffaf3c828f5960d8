package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/server/config"
)

// The first stage of a request: its descriptors, each with the rule of
// the configuration that decides it (resolve), and whether it may give
// back (judgeRefunds). Then decide.go decides them, and answer.go
// answers.

// descriptor is one descriptor of a request, resolved.
type descriptor struct {
	rule *rule // nil: no rule applies (or it was replaced)
	key  string
	hits int64
	// refund: envoy's is_negative_hits, which gives hits back; charge:
	// the hits are charged, whatever the rule says (/v1/decide's mode).
	refund, charge bool
	// asked is what the store was asked (see Service.request).
	asked driver.Request
	res   ratekeeper.Result
	// decided: res holds the store's answer for this descriptor.
	decided bool
}

// resolve finds each descriptor's rule, key and hits, applying replaces.
func (s *Service) resolve(snap *snapshot, req *rlsv3.RateLimitRequest) ([]descriptor, error) {
	domain := req.GetDomain()
	ds := make([]descriptor, len(req.GetDescriptors()))
	var replaced map[string]bool
	var entries []config.Entry
	known := snap.cfg.HasDomain(domain)
	for i, d := range req.GetDescriptors() {
		// Envoy's meaning of hits_addend: a descriptor's own, even 0 (a
		// peek), else the request's, where 0 (unset) means 1.
		hits := uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			hits = h.GetValue()
		}
		ds[i].hits = int64(min(hits, maxHits))
		ds[i].refund = d.GetIsNegativeHits()
		if !known {
			continue // an unknown domain limits nothing, even with an override
		}
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if o := d.GetLimit(); o != nil {
			r, err := s.overrides.get(s, o)
			if err != nil {
				return nil, err
			}
			ds[i].rule = r
		} else if r := snap.cfg.Lookup(domain, entries); r != nil {
			ds[i].rule = snap.rules[r]
			for _, name := range r.Replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
		if r := ds[i].rule; r != nil && !r.cfg.Unlimited {
			for j, v := range r.cfg.SharedValues {
				if v != "" && j < len(entries) {
					entries[j].Value = v
				}
			}
			ds[i].key = stateKey(domain, entries)
		}
	}
	for i := range ds {
		if r := ds[i].rule; r != nil && r.replaceable(replaced) {
			ds[i].rule = nil
		}
	}
	return ds, nil
}

// refundsOn reports whether d may give its hits back: Options.Refunds
// turns refunds on for every rule, a rule's refunds for its own
// descriptors.
func (s *Service) refundsOn(d *descriptor) bool {
	return s.opts.Refunds || d.rule != nil && d.rule.cfg.Refunds
}

// judgeRefunds keeps the refunds of ds (is_negative_hits) where they are
// on. Elsewhere each is counted, and then, through /v1/decide, the
// request is refused; through gRPC and /json the descriptor takes its
// hits as any other, as envoyproxy/ratelimit, which ignores the field,
// counts them.
func (s *Service) judgeRefunds(snap *snapshot, domain, endpoint string, ds []descriptor) error {
	var refused error
	for i := range ds {
		d := &ds[i]
		if !d.refund || s.refundsOn(d) {
			continue
		}
		snap.labels.refundRefused(domain, snap.cfg.HasDomain(domain), endpoint)
		d.refund = false
		if endpoint == endpointDecide && refused == nil {
			refused = fmt.Errorf("%w: descriptors[%d].mode: refund refused: %s", errInvalidRequest, i, refundsOff(d.rule))
		}
	}
	return refused
}

// refundsOff says why a refund on rule r (nil: no rule applied) was
// refused, and how the operator turns refunds on.
func refundsOff(r *rule) string {
	const every = "for every rule with ratekeeper-server's -refunds (or RATEKEEPER_REFUNDS=true)"
	switch {
	case r == nil:
		return "no rule applies to the descriptor, and refunds are off; they are turned on " + every
	case r.override:
		return "refunds are off for the request's limit override; they are turned on " + every
	}
	return fmt.Sprintf("refunds are off for rule %q of domain %q; turn them on with refunds: true in its rate_limit, or %s",
		r.cfg.Name, r.cfg.Domain, every)
}

// overrideKey identifies a request's limit override by its value.
type overrideKey struct {
	requests uint32
	unit     typev3.RateLimitUnit
	mult     uint32
}

// overrideCache holds the rules made from requests' limit overrides, by
// their value: two overrides of different values never share a rule, nor
// a counter.
type overrideCache struct {
	mu    sync.Mutex
	rules map[overrideKey]*rule
}

func (c *overrideCache) get(s *Service, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*rule, error) {
	k := overrideKey{requests: o.GetRequestsPerUnit(), unit: o.GetUnit(), mult: 1}
	if m := o.GetUnitMultiplier(); m != nil {
		k.mult = m.GetValue()
	}
	c.mu.Lock()
	r, ok := c.rules[k]
	c.mu.Unlock()
	if ok {
		return r, nil
	}
	r, err := s.overrideRule(k)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.rules) < maxOverrides {
		c.rules[k] = r
	}
	c.mu.Unlock()
	return r, nil
}

// overrideRule makes the rule of a limit override: envoy's fixed window
// aligned to the unit, under a state name of its own.
func (s *Service) overrideRule(k overrideKey) (*rule, error) {
	unit := rlsv3.RateLimitResponse_RateLimit_Unit(rlsv3.RateLimitResponse_RateLimit_Unit_value[typev3.RateLimitUnit_name[int32(k.unit)]])
	per := unitPeriod(unit)
	if per <= 0 {
		return nil, fmt.Errorf("%w: limit override with unit %s", errInvalidRequest, k.unit)
	}
	// The product is checked before it is made: a multiplier of up to
	// 2^32-1 times a year overflows a Duration.
	if mult := time.Duration(max(k.mult, 1)); mult > ratekeeper.MaxPeriod/per {
		return nil, fmt.Errorf("%w: limit override of %d per %d × %s: the period is longer than %s, the longest a limit may have",
			errInvalidRequest, k.requests, mult, k.unit, maxPeriodText)
	}
	period := per * time.Duration(max(k.mult, 1))
	limit := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: k.requests, Unit: unit}
	if k.mult > 1 {
		limit.UnitMultiplier = wrapperspb.UInt32(k.mult)
	}
	r := &rule{cfg: &config.Rule{Name: "override"}, override: true, shadow: s.opts.Shadow, block: k.requests == 0,
		first: limit, aligned: period, metrics: s.opts.Metrics.rule("", "override")}
	if r.block {
		s.setFields(r)
		return r, nil
	}
	name := fmt.Sprintf("override-%d-%s-%d", k.requests, strings.ToLower(unit.String()), max(k.mult, 1))
	lim, err := ratekeeper.New(s.store, ratekeeper.FixedWindow{Limit: int64(k.requests), Window: period, Aligned: true},
		ratekeeper.WithName(name))
	if err != nil {
		return nil, fmt.Errorf("%w: limit override: %w", errInvalidRequest, err)
	}
	r.spec, r.lim = lim.Spec(), lim
	r.setQuotas()
	s.setFields(r)
	return r, nil
}

// stateKey is the store key of a descriptor in domain: the domain and
// its entries, each part escaped so that distinct descriptors never share
// a key. Keys over the store's bound are hashed.
func stateKey(domain string, entries []config.Entry) string {
	var b strings.Builder
	b.WriteString(escapeKey(domain))
	for _, e := range entries {
		b.WriteByte('/')
		b.WriteString(escapeKey(e.Key))
		b.WriteByte('=')
		b.WriteString(escapeKey(e.Value))
	}
	if b.Len() <= ratekeeper.MaxKeyLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return escapeKey(domain) + "/#" + hex.EncodeToString(sum[:])
}

func escapeKey(s string) string {
	if !strings.ContainsAny(s, "%/=#") {
		return s
	}
	return keyEscaper.Replace(s)
}
