package ratekeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, on a system without them

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestCalendarWindows decides, on memstore and on Redis with a controlled
// clock, around the ends of calendar periods: each window ends on the
// right instant (ResetAfter and RetryAfter say so to the microsecond),
// holds its count until then, and the next starts afresh.
func TestCalendarWindows(t *testing.T) {
	berlin, newYork := zone(t, "Europe/Berlin"), zone(t, "America/New_York")
	kolkata, lordHowe := zone(t, "Asia/Kolkata"), zone(t, "Australia/Lord_Howe")
	cases := []struct {
		name     string
		calendar driver.Period
		loc      *time.Location
		at       time.Time     // a request in the window
		end      time.Time     // the window's end
		length   time.Duration // the window's
	}{
		{"February, 28 days", ratekeeper.Month, nil, time.Date(2027, 2, 15, 12, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{"February of a leap year, 29 days", ratekeeper.Month, nil, time.Date(2028, 2, 29, 23, 59, 59, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 29 * 24 * time.Hour},
		{"April, 30 days", ratekeeper.Month, berlin, time.Date(2027, 4, 30, 23, 59, 0, 0, berlin), time.Date(2027, 5, 1, 0, 0, 0, 0, berlin), 30 * 24 * time.Hour},
		{"January, 31 days", ratekeeper.Month, newYork, time.Date(2027, 1, 1, 0, 0, 0, 0, newYork), time.Date(2027, 2, 1, 0, 0, 0, 0, newYork), 31 * 24 * time.Hour},
		{"March in Berlin, an hour short", ratekeeper.Month, berlin, time.Date(2027, 3, 10, 0, 0, 0, 0, berlin), time.Date(2027, 4, 1, 0, 0, 0, 0, berlin), 31*24*time.Hour - time.Hour},
		{"31 December to 1 January", ratekeeper.Day, berlin, time.Date(2027, 12, 31, 23, 30, 0, 0, berlin), time.Date(2028, 1, 1, 0, 0, 0, 0, berlin), 24 * time.Hour},
		{"the year's last microsecond", ratekeeper.Year, nil, time.Date(2027, 12, 31, 23, 59, 59, 999999000, time.UTC), time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC), 365 * 24 * time.Hour},
		{"an ISO week across New Year", ratekeeper.Week, nil, time.Date(2027, 1, 1, 9, 0, 0, 0, time.UTC), time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"Berlin's spring day, 23 hours", ratekeeper.Day, berlin, time.Date(2027, 3, 28, 1, 30, 0, 0, berlin), time.Date(2027, 3, 29, 0, 0, 0, 0, berlin), 23 * time.Hour},
		{"Berlin's autumn day, 25 hours", ratekeeper.Day, berlin, time.Date(2027, 10, 31, 2, 30, 0, 0, berlin), time.Date(2027, 11, 1, 0, 0, 0, 0, berlin), 25 * time.Hour},
		{"New York's spring day, 23 hours", ratekeeper.Day, newYork, time.Date(2027, 3, 14, 12, 0, 0, 0, newYork), time.Date(2027, 3, 15, 0, 0, 0, 0, newYork), 23 * time.Hour},
		{"New York's autumn day, 25 hours", ratekeeper.Day, newYork, time.Date(2027, 11, 7, 1, 30, 0, 0, newYork), time.Date(2027, 11, 8, 0, 0, 0, 0, newYork), 25 * time.Hour},
		{"a day at +5:30", ratekeeper.Day, kolkata, time.Date(2027, 6, 1, 18, 0, 0, 0, time.UTC), time.Date(2027, 6, 1, 18, 30, 0, 0, time.UTC), 24 * time.Hour},
		{"Lord Howe's autumn day, 24½ hours", ratekeeper.Day, lordHowe, time.Date(2027, 4, 4, 12, 0, 0, 0, lordHowe), time.Date(2027, 4, 5, 0, 0, 0, 0, lordHowe), 24*time.Hour + 30*time.Minute},
		{"Lord Howe's spring day, 23½ hours", ratekeeper.Day, lordHowe, time.Date(2027, 10, 3, 12, 0, 0, 0, lordHowe), time.Date(2027, 10, 4, 0, 0, 0, 0, lordHowe), 23*time.Hour + 30*time.Minute},
	}
	stores := map[string]func(t *testing.T, clock *testutil.Clock) ratekeeper.Store{
		"memstore": func(t *testing.T, clock *testutil.Clock) ratekeeper.Store {
			s := memstore.New(memstore.WithClock(clock.Now))
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T, clock *testutil.Clock) ratekeeper.Store {
			return redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(clock.Now))
		},
		"redis-cluster": func(t *testing.T, clock *testutil.Clock) ratekeeper.Store {
			return redisstore.New(redistest.ClusterClient(t), redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(clock.Now))
		},
	}
	ctx := context.Background()
	for storeName, open := range stores {
		for _, c := range cases {
			t.Run(storeName+"/"+c.name, func(t *testing.T) {
				start := c.end.Add(-c.length)
				clock := testutil.NewClock(start)
				lim, err := ratekeeper.New(open(t, clock), ratekeeper.FixedWindow{Limit: 2, Calendar: c.calendar, Location: c.loc})
				if err != nil {
					t.Fatal(err)
				}
				// Its first microsecond: the window lasts its length.
				res, err := lim.Allow(ctx, "k")
				if err != nil || !res.Allowed || res.ResetAfter != c.length {
					t.Fatalf("at the start, %v: %+v, %v; want allowed, resetting in %v", start, res, err, c.length)
				}
				clock.Set(c.at)
				left := c.end.Sub(c.at)
				res, err = lim.Allow(ctx, "k")
				if err != nil || !res.Allowed || res.Remaining != 0 || res.ResetAfter != left {
					t.Fatalf("at %v: %+v, %v; want allowed, the last, resetting in %v", c.at, res, err, left)
				}
				clock.Set(c.end.Add(-time.Microsecond))
				res, err = lim.Allow(ctx, "k")
				if err != nil || res.Allowed || res.RetryAfter != time.Microsecond || res.ResetAfter != time.Microsecond {
					t.Fatalf("a microsecond before the end: %+v, %v; want denied, retrying in 1µs", res, err)
				}
				clock.Set(c.end)
				res, err = lim.Allow(ctx, "k")
				if err != nil || !res.Allowed || res.Remaining != 1 {
					t.Fatalf("at the end: %+v, %v; want allowed in a fresh window", res, err)
				}
			})
		}
	}
}

// TestCalendarWindowsRefused: a calendar window's errors.
func TestCalendarWindowsRefused(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	for name, p := range map[string]ratekeeper.FixedWindow{
		"Calendar with Window":  {Limit: 1, Calendar: ratekeeper.Month, Window: time.Hour},
		"Calendar with Aligned": {Limit: 1, Calendar: ratekeeper.Month, Aligned: true},
		"unknown Calendar":      {Limit: 1, Calendar: 9},
		"Location, no Calendar": {Limit: 1, Window: time.Hour, Location: time.UTC},
		"Limit 0 with Calendar": {Limit: 0, Calendar: ratekeeper.Day},
	} {
		_, err := ratekeeper.New(store, p)
		var pe *ratekeeper.PolicyError
		if !errors.As(err, &pe) {
			t.Errorf("%s: %v; want a *PolicyError", name, err)
		}
	}
}

// TestCalendarWindowsServerClock: on Redis's own clock, a daily window in
// a zone 30 minutes off the hour ends at the zone's next midnight.
func TestCalendarWindowsServerClock(t *testing.T) {
	kolkata := zone(t, "Asia/Kolkata")
	lim, err := ratekeeper.New(redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(redistest.Prefix(t))),
		ratekeeper.FixedWindow{Limit: 5, Calendar: ratekeeper.Day, Location: kolkata})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	res, err := lim.Allow(context.Background(), "k")
	after := time.Now()
	if err != nil || !res.Allowed {
		t.Fatalf("%+v, %v", res, err)
	}
	y, m, d := after.In(kolkata).Date()
	end := time.Date(y, m, d+1, 0, 0, 0, 0, kolkata)
	if lo, hi := end.Sub(after)-time.Second, end.Sub(before)+time.Second; res.ResetAfter < lo || res.ResetAfter > hi {
		t.Errorf("ResetAfter %v; want %v to %v: the day ends at %v", res.ResetAfter, lo, hi, end)
	}
}
