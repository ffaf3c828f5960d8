package config

import (
	"slices"
	"time"
)

// A Unit is one of envoy's rate limit units: the
// RateLimitResponse.RateLimit.Unit enum, by its name, and its length as
// envoy counts it (a month is 30 days and a year 365).
type Unit struct {
	// Name is the enum's name, upper case: "SECOND".
	Name string
	// Period is the unit's length.
	Period time.Duration
}

// units are envoy's units, from the shortest: the one table of them.
var units = []Unit{
	{"SECOND", time.Second},
	{"MINUTE", time.Minute},
	{"HOUR", time.Hour},
	{"DAY", 24 * time.Hour},
	{"WEEK", 7 * 24 * time.Hour},
	{"MONTH", 30 * 24 * time.Hour},
	{"YEAR", 365 * 24 * time.Hour},
}

// Units returns envoy's units, from the shortest.
func Units() []Unit { return slices.Clone(units) }

// UnitPeriod returns the length of the unit called name (upper case, as
// envoy reads a file's unit once upper-cased, and as the enum names it).
func UnitPeriod(name string) (time.Duration, bool) {
	for _, u := range units {
		if u.Name == name {
			return u.Period, true
		}
	}
	return 0, false
}

// PeriodUnit expresses a period as a whole number of the largest unit of
// a day at most that divides it, such as 2 and "HOUR" for two hours; ""
// when none does, or the number exceeds a uint32. Weeks, months and years
// are left to the limits that name them: a period is never expressed in
// them, since a month is 30 days only to envoy.
func PeriodUnit(p time.Duration) (name string, n uint32) {
	for _, u := range slices.Backward(units) {
		if u.Period > 24*time.Hour {
			continue
		}
		if p >= u.Period && p%u.Period == 0 && p/u.Period <= 1<<32-1 {
			return u.Name, uint32(p / u.Period)
		}
	}
	return "", 1
}
