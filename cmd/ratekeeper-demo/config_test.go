package main

import (
	"errors"
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

// TestCalendarConfig: the fixed window takes a calendar period and a time
// zone, which make its policy's windows calendar periods; other
// algorithms, unknown periods and zones are refused, each naming its
// field.
func TestCalendarConfig(t *testing.T) {
	cur := defaultConfig()
	c, err := parseConfig(map[string]string{"algorithm": "fixed_window", "limit": "10000", "calendar": "month", "time_zone": "Europe/Berlin"}, cur)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.policy()
	fw, ok := p.(ratekeeper.FixedWindow)
	if err != nil || !ok || fw.Limit != 10000 || fw.Calendar != ratekeeper.Month || fw.Window != 0 || fw.Location.String() != "Europe/Berlin" {
		t.Fatalf("%v: %#v, %v", c, p, err)
	}
	if _, err := newLimiter(memoryBackend(t).store, c); err != nil {
		t.Fatal(err)
	}
	b, _ := c.MarshalJSON()
	var back config
	if err := back.UnmarshalJSON(b); err != nil || !back.equal(c) {
		t.Errorf("%s read back as %v, %v", b, back, err)
	}
	// Back to windows of a length: no zone.
	plain, err := parseConfig(map[string]string{"calendar": "none"}, c)
	if err != nil || plain.Calendar != "" || plain.Zone != "" {
		t.Errorf("calendar none: %v, %v", plain, err)
	}
	for _, tc := range []struct {
		fields map[string]string
		field  string
	}{
		{map[string]string{"algorithm": "gcra", "calendar": "day"}, "calendar"},
		{map[string]string{"algorithm": "fixed_window", "calendar": "fortnight"}, "calendar"},
		{map[string]string{"algorithm": "fixed_window", "calendar": "day", "time_zone": "Mars/Olympus"}, "time_zone"},
	} {
		_, err := parseConfig(tc.fields, cur)
		var ce *configError
		if !errors.As(err, &ce) || ce.field != tc.field {
			t.Errorf("%v: %v; want an error of field %s", tc.fields, err, tc.field)
		}
	}
}
