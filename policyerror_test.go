package ratekeeper_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestPolicyErrorNamesTheField checks that New's error for each invalid
// field of each policy is a *PolicyError naming the policy and the field,
// matching ErrInvalidPolicy, in one line.
func TestPolicyErrorNamesTheField(t *testing.T) {
	tb := ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second}
	gcra := ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}
	fw := ratekeeper.FixedWindow{Limit: 10, Window: time.Second}
	tests := []struct {
		policy      ratekeeper.Policy
		name, field string
	}{
		{ratekeeper.TokenBucket{RefillRate: 1, RefillInterval: time.Second}, "TokenBucket", "Capacity"},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: math.NaN(), RefillInterval: time.Second}, "TokenBucket", "RefillRate"},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1e-9, RefillInterval: time.Second}, "TokenBucket", "RefillRate"},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Nanosecond}, "TokenBucket", "RefillInterval"},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1}, "TokenBucket", "RefillInterval"},
		{ratekeeper.GCRA{Period: time.Second, Burst: 1}, "GCRA", "Rate"},
		{ratekeeper.GCRA{Rate: 10, Period: 5 * time.Microsecond, Burst: 1}, "GCRA", "Rate"},
		{ratekeeper.GCRA{Rate: 10, Burst: 1}, "GCRA", "Period"},
		{ratekeeper.GCRA{Rate: 10, Period: time.Second}, "GCRA", "Burst"},
		{ratekeeper.FixedWindow{Window: time.Second}, "FixedWindow", "Limit"},
		{ratekeeper.FixedWindow{Limit: 1, Window: -time.Second}, "FixedWindow", "Window"},
		{ratekeeper.SlidingWindowLog{Limit: ratekeeper.MaxLogLimit + 1, Window: time.Second}, "SlidingWindowLog", "Limit"},
		{ratekeeper.SlidingWindowLog{Limit: 1}, "SlidingWindowLog", "Window"},
		{ratekeeper.SlidingWindowCounter{Limit: -1, Window: time.Second}, "SlidingWindowCounter", "Limit"},
		{ratekeeper.SlidingWindowCounter{Limit: 1, Window: 1500 * time.Nanosecond}, "SlidingWindowCounter", "Window"},
		{ratekeeper.LeakyBucket{LeakRate: 1}, "LeakyBucket", "Capacity"},
		{ratekeeper.LeakyBucket{Capacity: 1, LeakRate: math.Inf(1)}, "LeakyBucket", "LeakRate"},
		{ratekeeper.LeakyBucket{Capacity: 1, LeakRate: 1e-12}, "LeakyBucket", "LeakRate"},
		// Inside All and Named, the part's own error.
		{ratekeeper.All(tb, ratekeeper.GCRA{Rate: 10, Period: time.Second}), "GCRA", "Burst"},
		{ratekeeper.Named("x", ratekeeper.FixedWindow{Limit: 1}), "FixedWindow", "Window"},
		{ratekeeper.All(gcra, fw, ratekeeper.All()), "All", ""},
	}
	for _, tt := range tests {
		_, err := ratekeeper.New(memstore.New(), tt.policy)
		var pe *ratekeeper.PolicyError
		if !errors.As(err, &pe) || !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v; want a *PolicyError matching ErrInvalidPolicy", tt.policy, err)
			continue
		}
		if pe.Policy != tt.name || pe.Field != tt.field || pe.Reason == "" {
			t.Errorf("New(%+v) = %#v; want Policy %q, Field %q and a Reason", tt.policy, pe, tt.name, tt.field)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "ratekeeper: invalid policy: "+tt.name) {
			t.Errorf("New(%+v): message %q", tt.policy, msg)
		}
	}
}
