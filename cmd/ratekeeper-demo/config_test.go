package main

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestSeconds(t *testing.T) {
	for s, want := range map[float64]time.Duration{
		1:        time.Second,
		0.1:      100 * time.Millisecond,
		1.5:      1500 * time.Millisecond,
		0.000001: time.Microsecond,
		-2:       -2 * time.Second,
	} {
		if got, err := seconds("window", s); err != nil || got != want {
			t.Errorf("seconds(%v) = %v, %v; want %v", s, got, err, want)
		}
	}
}

// TestPolicies checks that each configuration becomes the policy it names.
func TestPolicies(t *testing.T) {
	tests := map[config]ratekeeper.Policy{
		{Algorithm: "token_bucket", Capacity: 5, RefillRate: 0.5, RefillInterval: 0.25}: ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.5, RefillInterval: 250 * time.Millisecond},
		{Algorithm: "gcra", Rate: 2, Period: 3, Burst: 4}:                               ratekeeper.GCRA{Rate: 2, Period: 3 * time.Second, Burst: 4},
		{Algorithm: "fixed_window", Limit: 7, Window: 60}:                               ratekeeper.FixedWindow{Limit: 7, Window: time.Minute},
		{Algorithm: "sliding_window_log", Limit: 7, Window: 60}:                         ratekeeper.SlidingWindowLog{Limit: 7, Window: time.Minute},
		{Algorithm: "sliding_window_counter", Limit: 7, Window: 60}:                     ratekeeper.SlidingWindowCounter{Limit: 7, Window: time.Minute},
		{Algorithm: "leaky_bucket", Capacity: 3, LeakRate: 1.5}:                         ratekeeper.LeakyBucket{Capacity: 3, LeakRate: 1.5},
	}
	for c, want := range tests {
		got, err := c.policy()
		if err != nil || got != want {
			t.Errorf("%+v: %#v, %v; want %#v", c, got, err, want)
		}
	}
}

// TestDefaults checks that every algorithm's defaults are valid.
func TestDefaults(t *testing.T) {
	for _, a := range algorithms {
		if _, err := newLimiter(memoryBackend(t).store, withAlgorithm(a.Name)); err != nil {
			t.Errorf("%s defaults: %v", a.Name, err)
		}
	}
}
