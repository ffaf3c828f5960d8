package main

import (
	"flag"

	"github.com/ratekeeper/ratekeeper/server"
)

// countingFlags registers the flags that say how hits count.
func (s *settings) countingFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.deniedHitsFlag, "denied-hits", "",
		"what a denied request's descriptors take: none; all, every hit counts (envoy's default); or over, those over their limit (envoy's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT). Default: envoy's, from that variable, when started with no flags, else none")
	fs.BoolVar(&s.countOverLimit, "count-over-limit", false,
		"every rule counts its hits over its limit, as a rule's count_over_limit does: charged into debt, for costs known after the response")
	fs.DurationVar(&s.leases, "leases", s.leases,
		"leases of this TTL (such as 50ms; 0 for none) for every rule whose algorithm takes them and that sets no lease of its own: a descriptor's takes are then decided in process from a lease of its key, past one Redis core, within the rule's bound (RATEKEEPER_LEASES)")
	fs.BoolVar(&s.refunds, "refunds", s.refunds,
		"every rule takes refunds (is_negative_hits, /v1/decide's mode refund), as a rule's refunds: true does; off, they are ignored on gRPC and /json and refused on /v1/decide. Only for callers trusted to give back what they took (RATEKEEPER_REFUNDS)")
}

// deniedHits is the service's DeniedHits: the flag's, else envoy's
// counting in envoy's environment (started with no flags), else
// ratekeeper's, where a denied request takes nothing.
func (s *settings) deniedHits() server.DeniedHits {
	if s.deniedHitsFlag != "" {
		d, _ := server.ParseDeniedHits(s.deniedHitsFlag) // checked by validate
		return d
	}
	switch {
	case !s.envoyEnv:
		return server.DeniedTakeNothing
	case s.env.StopCacheKeyIncrementWhenOverlimit:
		return server.DeniedCountOver
	}
	return server.DeniedCountAll
}
