package server

import (
	"fmt"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// DeniedHits says what the descriptors of a denied request take.
type DeniedHits int

const (
	// DeniedTakeNothing: a denied request takes nothing from any of its
	// descriptors, except those of rules that count over the limit
	// (count_over_limit, or Options.CountOverLimit), which are charged
	// their hits whatever the others decide. ratekeeper's default.
	DeniedTakeNothing DeniedHits = iota
	// DeniedCountAll: every hit counts, a denied request's included, on
	// every descriptor, as envoyproxy/ratelimit counts by default.
	DeniedCountAll
	// DeniedCountOver: a denied request's hits count on the descriptors
	// that are over their limit, and the others are spared, as envoy's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT has it.
	DeniedCountOver
)

// ParseDeniedHits reads the -denied-hits flag: "none", "all" or "over".
func ParseDeniedHits(s string) (DeniedHits, error) {
	switch s {
	case "none":
		return DeniedTakeNothing, nil
	case "all":
		return DeniedCountAll, nil
	case "over":
		return DeniedCountOver, nil
	}
	return 0, fmt.Errorf("denied-hits must be none, all or over, not %q", s)
}

// String returns the flag's value for d.
func (d DeniedHits) String() string {
	switch d {
	case DeniedCountAll:
		return "all"
	case DeniedCountOver:
		return "over"
	}
	return "none"
}

// request is a descriptor's request to the store: its key, cost and how
// the cost counts, as the rule and Options.DeniedHits say. A refund
// (is_negative_hits, where refunds are on) gives its hits back whatever
// they say, up to the most one request of the rule may take: a refund
// gives back at most what a request could have taken, so that no single
// one wipes a debt that charges left.
func (s *Service) request(d *descriptor) driver.Request {
	r := driver.Request{Key: d.key, Spec: d.rule.spec, N: d.hits, Mode: driver.Take}
	switch {
	case d.hits == 0:
	case d.refund:
		r.Mode = driver.Refund
		r.N = min(r.N, d.rule.spec.MaxCost())
	case d.charge || d.rule.cfg.CountOverLimit || s.opts.CountOverLimit || s.opts.DeniedHits == DeniedCountAll:
		r.Mode = driver.Charge
	case s.opts.DeniedHits == DeniedCountOver:
		r.ChargeOver = true
		if d.hits > d.rule.spec.MaxCost() {
			// It cannot fit: it is over its limit, and charged.
			r.Mode, r.ChargeOver = driver.Charge, false
		}
	}
	if r.Mode != driver.Take {
		// A charge or a refund takes up to the most a store accepts.
		r.N = min(r.N, ratekeeper.MaxLimit)
	}
	return r
}
