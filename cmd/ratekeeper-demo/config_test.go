package main

import (
	"fmt"
	"regexp"
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

// TestDefaults checks that every algorithm's defaults are valid, and that
// the page's form starts from the same values.
func TestDefaults(t *testing.T) {
	page, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]string{
		"token_bucket": "tb", "gcra": "gcra", "fixed_window": "fw",
		"sliding_window_log": "swl", "sliding_window_counter": "swc", "leaky_bucket": "lb",
	}
	for alg, fields := range params {
		c := withAlgorithm(alg)
		if _, err := newLimiter(memoryBackend(t).store, c); err != nil {
			t.Errorf("%s defaults: %v", alg, err)
		}
		if !regexp.MustCompile(`<option value="` + alg + `">`).Match(page) {
			t.Errorf("the page offers no %s", alg)
		}
		for _, f := range fields {
			m := regexp.MustCompile(`id="` + prefixes[alg] + "-" + f + `"[^>]*value="([^"]*)"`).FindSubmatch(page)
			if m == nil {
				t.Errorf("the page has no %s field for %s", f, alg)
				continue
			}
			var parsed config
			if err := parsed.set(f, string(m[1])); err != nil {
				t.Errorf("the page's %s %s: %v", alg, f, err)
				continue
			}
			parsed.Algorithm = alg
			if fmt.Sprint(value(parsed, f)) != fmt.Sprint(value(c, f)) {
				t.Errorf("the page's %s %s is %s, the server's %v", alg, f, m[1], value(c, f))
			}
		}
	}
}

func value(c config, field string) any {
	return map[string]any{
		"capacity": c.Capacity, "refill_rate": c.RefillRate, "refill_interval": c.RefillInterval,
		"rate": c.Rate, "period": c.Period, "burst": c.Burst,
		"limit": c.Limit, "window": c.Window, "leak_rate": c.LeakRate,
	}[field]
}
