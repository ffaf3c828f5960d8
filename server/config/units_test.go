package config

import (
	"testing"
	"time"
)

// TestUnits checks envoy's unit lengths, and that a period is expressed in
// the largest unit of a day at most that divides it.
func TestUnits(t *testing.T) {
	for name, want := range map[string]time.Duration{
		"SECOND": time.Second, "MINUTE": time.Minute, "HOUR": time.Hour, "DAY": 24 * time.Hour,
		"WEEK": 7 * 24 * time.Hour, "MONTH": 30 * 24 * time.Hour, "YEAR": 365 * 24 * time.Hour,
	} {
		if got, ok := UnitPeriod(name); !ok || got != want {
			t.Errorf("UnitPeriod(%s) = %v, %v; want %v", name, got, ok, want)
		}
	}
	if _, ok := UnitPeriod("second"); ok {
		t.Error("UnitPeriod takes lower case")
	}
	for p, want := range map[time.Duration]struct {
		name string
		n    uint32
	}{
		time.Second:             {"SECOND", 1},
		90 * time.Second:        {"SECOND", 90},
		15 * time.Minute:        {"MINUTE", 15},
		7 * 24 * time.Hour:      {"DAY", 7},
		30 * 24 * time.Hour:     {"DAY", 30},
		1500 * time.Millisecond: {"", 1},
		(1 << 32) * time.Second: {"", 1},
	} {
		if name, n := PeriodUnit(p); name != want.name || n != want.n {
			t.Errorf("PeriodUnit(%v) = %s, %d; want %s, %d", p, name, n, want.name, want.n)
		}
	}
}
