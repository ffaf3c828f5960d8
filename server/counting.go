package server

import (
	"fmt"
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
