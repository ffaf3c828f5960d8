package main

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// TestPolicies checks that each configuration becomes the policy it names:
// each field the policy's field it stands for, seconds as durations.
func TestPolicies(t *testing.T) {
	tb := withValues("token_bucket", map[string]float64{"capacity": 5, "refill_rate": 0.5, "refill_interval": 0.25})
	if got, err := tb.policy(); err != nil || got != (ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.5, RefillInterval: 250 * time.Millisecond}) {
		t.Errorf("%v: %#v, %v", tb, got, err)
	}
	for _, a := range algorithms {
		values := map[string]float64{}
		for i, f := range a.Fields {
			values[f.Name] = float64(i + 2)
		}
		c := withValues(a.Name, values)
		got, err := c.policy()
		want, _ := a.alg.Build(c.values)
		if err != nil || got != want {
			t.Errorf("%v: %#v, %v; want %#v", c, got, err, want)
		}
		for i, f := range a.Fields {
			if c.value(f.Name) != float64(i+2) {
				t.Errorf("%v: %s is %v", c, f.Name, c.value(f.Name))
			}
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

// TestConfigJSONRoundTrip checks that a config is written as the page
// reads it, and read back.
func TestConfigJSONRoundTrip(t *testing.T) {
	c := withValues("gcra", map[string]float64{"rate": 3, "period": 0.5, "burst": 1000000000})
	b, err := c.MarshalJSON()
	if want := `{"algorithm":"gcra","rate":3,"period":0.5,"burst":1000000000}`; err != nil || string(b) != want {
		t.Fatalf("MarshalJSON = %s, %v; want %s", b, err, want)
	}
	var back config
	if err := back.UnmarshalJSON(b); err != nil || !back.equal(c) {
		t.Errorf("UnmarshalJSON = %v, %v; want %v", back, err, c)
	}
}
