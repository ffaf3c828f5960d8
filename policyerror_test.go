package ratekeeper_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
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

// TestPolicyErrorBound checks that New's error says which bound a field
// broke, and the bound's value, for callers that explain it in their own
// words.
func TestPolicyErrorBound(t *testing.T) {
	maxPeriod := ratekeeper.MaxPeriod.Seconds()
	tests := []struct {
		policy ratekeeper.Policy
		field  string
		bound  driver.Bound
		limit  float64
	}{
		{ratekeeper.TokenBucket{RefillRate: 1, RefillInterval: time.Second}, "Capacity", driver.BoundMin, 1},
		{ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit + 1, RefillRate: 1, RefillInterval: time.Second}, "Capacity", driver.BoundMax, ratekeeper.MaxLimit},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: -1, RefillInterval: time.Second}, "RefillRate", driver.BoundMin, 0},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: math.Inf(1), RefillInterval: time.Second}, "RefillRate", driver.BoundMax, ratekeeper.MaxLimit},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 2e9, RefillInterval: time.Second}, "RefillRate", driver.BoundMax, ratekeeper.MaxLimit},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1e-7, RefillInterval: time.Second}, "RefillRate", driver.BoundResolution, 1e-6},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: 1500 * time.Nanosecond}, "RefillInterval", driver.BoundResolution, 1e-6},
		{ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1}, "RefillInterval", driver.BoundMin, 0},
		{ratekeeper.TokenBucket{Capacity: ratekeeper.MaxLimit, RefillRate: 1e-6, RefillInterval: time.Second}, "RefillRate", driver.BoundPeriod, maxPeriod},
		{ratekeeper.GCRA{Rate: 10, Period: 5 * time.Microsecond, Burst: 1}, "Rate", driver.BoundRate, 5},
		{ratekeeper.GCRA{Rate: 1, Period: 300_000_000 * time.Second, Burst: 5}, "Burst", driver.BoundPeriod, maxPeriod},
		{ratekeeper.FixedWindow{Window: time.Second}, "Limit", driver.BoundMin, 1},
		{ratekeeper.SlidingWindowLog{Limit: ratekeeper.MaxLogLimit + 1, Window: time.Second}, "Limit", driver.BoundMax, ratekeeper.MaxLogLimit},
		{ratekeeper.LeakyBucket{Capacity: ratekeeper.MaxLeakyCapacity + 1, LeakRate: 1}, "Capacity", driver.BoundMax, ratekeeper.MaxLeakyCapacity},
		{ratekeeper.LeakyBucket{Capacity: 1, LeakRate: 0}, "LeakRate", driver.BoundMin, 0},
		{ratekeeper.LeakyBucket{Capacity: 1, LeakRate: math.NaN()}, "LeakRate", driver.NoBound, 0},
		{ratekeeper.LeakyBucket{Capacity: 10, LeakRate: 1e-8}, "LeakRate", driver.BoundPeriod, maxPeriod},
		{ratekeeper.All(), "", driver.NoBound, 0},
	}
	for _, tt := range tests {
		_, err := ratekeeper.New(memstore.New(), tt.policy)
		var pe *ratekeeper.PolicyError
		if !errors.As(err, &pe) || pe.Field != tt.field || pe.Bound != tt.bound || pe.Limit != tt.limit {
			t.Errorf("New(%+v) = %#v; want Field %q, %v of %v", tt.policy, err, tt.field, tt.bound, tt.limit)
		}
	}
}
