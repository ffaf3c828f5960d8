package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// FixedWindow allows Limit requests per Window. By default a key's window
// starts at its first request (as an INCR with an expiry does); with
// Aligned, windows start at whole multiples of Window since the Unix epoch,
// the same for every key (as an INCR on a key named after the time bucket
// does, and envoyproxy/ratelimit): a one-minute window runs from one
// minute's :00 to the next's, and a key's first request at :59.5 has half
// a second of it left. It is the simplest and cheapest to reason about,
// but a client may pass almost 2×Limit within a short span: the rest of
// one window's Limit at its end, and Limit at the start of the next.
// Denied requests do not count. A Charge beyond Limit leaves the window in
// debt, which it forgets when it ends: the next window starts afresh.
//
// With Calendar, the windows are calendar periods in Location: a day, an
// ISO week (from Monday), a month or a year, each from local midnight of
// its first day, through offset changes (a day of 23 or 25 hours), month
// lengths and leap years, the same for every key: "10,000 per month",
// renewed on the 1st. The window is the period that contains the store's
// time, and ResetAfter and RetryAfter end exactly where it does.
type FixedWindow struct {
	// Limit is the number of requests allowed per window. 1 to MaxLimit.
	Limit int64
	// Window is the length of a window, in whole microseconds.
	Window time.Duration
	// Aligned starts windows at multiples of Window since the Unix epoch,
	// rather than at a key's first request. An aligned and an unaligned
	// window never share a key's state, whatever their names.
	Aligned bool
	// Calendar, if set, makes the windows calendar periods: Day, Week,
	// Month or Year, in place of Window (which must then be 0) and
	// Aligned.
	Calendar driver.Period
	// Location is the time zone of calendar periods; nil is UTC. Zones
	// are known by name: windows of different zones, or periods, never
	// share a key's state.
	Location *time.Location
}

// The calendar periods of FixedWindow.Calendar.
const (
	Day   = driver.Day   // from midnight to midnight, local time
	Week  = driver.Week  // ISO weeks, from Monday
	Month = driver.Month // from the 1st
	Year  = driver.Year  // from January 1st
)

func init() {
	driver.Register(driver.AlgorithmFixedWindow, driver.Algorithm{Check: checkFixedWindow, Step: stepFixedWindow, Lease: leaseFixedWindow, Short: "fw", Variant: fixedWindowVariant})
}

// Spec validates the policy and returns its integer form: Params holds
// Limit as Capacity, Window as Interval, in microseconds, and Aligned as
// Rate: 1 if aligned, else 0. A calendar window's Rate is
// driver.AlignCalendar, its Interval the longest its period lasts, and
// its Cost the id of its calendar (driver.CalendarID).
func (p FixedWindow) Spec() (driver.Spec, error) {
	if p.Calendar != 0 {
		switch {
		case p.Calendar < Day || p.Calendar > Year:
			return driver.Spec{}, policyError("FixedWindow", "Calendar", "%d is none of Day, Week, Month and Year", int64(p.Calendar))
		case p.Window != 0:
			return driver.Spec{}, policyError("FixedWindow", "Window", "%v is set with a Calendar, whose periods are the windows: leave it 0", p.Window)
		case p.Aligned:
			return driver.Spec{}, policyError("FixedWindow", "Aligned", "is set with a Calendar, whose periods are aligned already: leave it false")
		}
		longest := time.Duration(p.Calendar.Longest()) * time.Microsecond
		s, err := windowSpec(driver.AlgorithmFixedWindow, "FixedWindow", MaxLimit, p.Limit, longest, checkFixedWindow)
		if err == nil {
			s.Params.Rate, s.Params.Cost = driver.AlignCalendar, driver.CalendarID(p.Calendar, p.Location)
		}
		return s, err
	}
	if p.Location != nil {
		return driver.Spec{}, policyError("FixedWindow", "Location", "%v is set without a Calendar: windows of a Window have no time zone", p.Location)
	}
	s, err := windowSpec(driver.AlgorithmFixedWindow, "FixedWindow", MaxLimit, p.Limit, p.Window, checkFixedWindow)
	if err == nil && p.Aligned {
		s.Params.Rate = 1
	}
	return s, err
}

// fixedWindowVariant keeps aligned windows' state apart from the others',
// and calendar windows' apart by period and zone: a count of one kind of
// window means nothing to another.
func fixedWindowVariant(p driver.Params) string {
	switch p.Rate {
	case 1:
		return "a"
	case driver.AlignCalendar:
		period, loc, _ := driver.CalendarOf(p.Cost)
		return "c" + period.String()[:1] + loc.String()
	}
	return ""
}

// windowSpec builds the Spec of a window policy.
func windowSpec(algorithm, policy string, maxLimit, limit int64, window time.Duration,
	check func(*driver.Spec) (int64, error)) (driver.Spec, error) {
	if limit <= 0 || limit > maxLimit {
		return driver.Spec{}, rangeError(policy, "Limit", 1, maxLimit, limit)
	}
	w, err := micros(policy, "Window", window)
	if err != nil {
		return driver.Spec{}, err
	}
	return withWindow(driver.Spec{
		Algorithm: algorithm,
		Limit:     limit,
		MaxCost:   limit,
		Params:    driver.Params{Capacity: limit, Interval: w},
	}, check)
}

// checkFixedWindow checks the Spec of a fixed window, whose Rate holds its
// alignment (and a calendar window's Cost its calendar), and returns its
// Window.
func checkFixedWindow(s *driver.Spec) (int64, error) {
	plain := *s
	plain.Params.Rate = 0
	switch s.Params.Rate {
	case 0, 1:
	case driver.AlignCalendar:
		period, _, ok := driver.CalendarOf(s.Params.Cost)
		if !ok {
			return 0, policyError(s.Algorithm, "", "calendar parameter %d names no calendar", s.Params.Cost)
		}
		if s.Params.Interval != period.Longest() {
			return 0, policyError(s.Algorithm, "", "window parameter %d is not the longest %s (%d)", s.Params.Interval, period, period.Longest())
		}
		plain.Params.Cost = 0
	default:
		return 0, policyError(s.Algorithm, "", "alignment parameter %d is none of 0, 1 and %d", s.Params.Rate, driver.AlignCalendar)
	}
	return checkWindow(&plain)
}

// checkWindow checks the Spec of a window policy and returns its Window.
func checkWindow(s *driver.Spec) (int64, error) {
	if s.Params.Capacity != s.Limit || s.Params.Rate != 0 || s.Params.Cost != 0 {
		return 0, policyError(s.Algorithm, "", "limit parameter %d differs from its Limit %d", s.Params.Capacity, s.Limit)
	}
	return s.Params.Interval, nil
}

// stepFixedWindow is the model that redisstore's fixed_window.lua keeps.
// State: v[0] the count, above Limit by a debt, v[1] the start of the
// window, or a calendar window's end. Params.Rate is 1 for windows
// aligned to the epoch, driver.AlignCalendar for calendar periods.
func stepFixedWindow(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	limit := p.Capacity
	count, start, end := fixedWindowAt(p, st, now)
	mark := fixedWindowMark(p, start, end)
	need := want(n)
	allowed := count+need <= limit
	var capped bool
	switch {
	case mode == driver.Charge:
		// The debt lasts as long as the window: the next starts afresh.
		count, capped = chargeCount(count, n, limit)
		st.Live, st.V[0], st.V[1] = true, count, mark
		need = 1
	case mode == driver.Refund:
		if st.Live && count > 0 {
			count = max(count-n, 0)
			st.V[0], st.V[1] = count, mark
			if count == 0 {
				*st = state{}
			}
		}
		need = 1
		allowed = count+need <= limit
	case allowed && mode == driver.Take:
		count += n
		st.Live, st.V[0], st.V[1] = true, count, mark
	}
	var retryAfter, resetAfter int64
	if !allowed || mode == driver.Charge && count+need > limit {
		retryAfter = end - now // the next window admits any cost up to Limit
	}
	if count > 0 {
		resetAfter = end - now
	}
	return outcome{Allowed: allowed, Remaining: (limit - count) * unit, RetryAfter: retryAfter, ResetAfter: resetAfter, Capped: capped}
}

// fixedWindowAt returns the count, the start and the end of the window
// at now. A calendar window's state keeps its end, which the clock may
// be behind; its start is then the end of the window before, if that
// one is among the bounds at now, else its end (no lease is of it).
func fixedWindowAt(p driver.Params, st *state, now int64) (count, start, end int64) {
	if p.Rate == driver.AlignCalendar {
		b, _ := driver.CalendarEnds(p.Cost, now)
		start, end, _ = b.Pick(now)
		if st.Live && now < st.V[1] {
			count = st.V[0]
			if st.V[1] != end {
				start, end = st.V[1], st.V[1]
				for i := 1; i < len(b); i++ {
					if b[i] == end {
						start = b[i-1]
					}
				}
			}
		}
		return count, start, end
	}
	aligned, window := p.Rate, p.Interval
	count, start = 0, now
	if aligned == 1 {
		start = now - now%window
	}
	if st.Live && now < st.V[1]+window { // or the clock is behind its start
		count, start = st.V[0], st.V[1]
	}
	return count, start, start + window
}

// fixedWindowMark is what a window's state keeps in v[1]: its start, or
// a calendar window's end.
func fixedWindowMark(p driver.Params, start, end int64) int64 {
	if p.Rate == driver.AlignCalendar {
		return end
	}
	return start
}

// leaseFixedWindow is the lease step (driver.Algorithm.Lease). A window
// needs no holds: a lease takes its units into the window's count, and
// expires at the window's end if that comes before its TTL, so every unit
// leased is spent in the window that counted it. req.Back's unused units
// come back to the count if its lease was taken in this window (it
// expires after this window's start).
func leaseFixedWindow(p driver.Params, st *state, now int64, req driver.LeaseRequest) (driver.Lease, outcome) {
	limit := p.Capacity
	count, start, end := fixedWindowAt(p, st, now)
	changed := false
	if req.Back.Units > 0 && req.Unused > 0 && count > 0 && req.Back.Expires > start && req.Back.Expires <= end {
		count = max(count-req.Unused, 0)
		changed = true
	}
	need := max(req.Min, 1)
	var lease driver.Lease
	if req.Want > 0 && count+need <= limit {
		// At most half of what is left, so that other holders and
		// Limiters without leases find some of it too.
		take := min(req.Want, max(req.Min, 1, (limit-count)/2))
		if take > req.Min {
			lease = driver.Lease{Units: take - req.Min, Expires: min(now+req.TTL, end)}
		}
		count += take
		need, changed = 0, true
	}
	if changed {
		st.Live, st.V[0], st.V[1] = true, count, fixedWindowMark(p, start, end)
		if count == 0 {
			*st = state{}
		}
	}
	return lease, fixedWindowOutcome(p, now, count, end, need)
}

// fixedWindowOutcome is the Outcome of a request of cost need (0 for one
// that was taken) on the count of a window that ends at end.
func fixedWindowOutcome(p driver.Params, now, count, end, need int64) outcome {
	limit := p.Capacity
	o := outcome{Allowed: count+need <= limit, Remaining: (limit - count) * unit}
	if !o.Allowed {
		o.RetryAfter = end - now
	}
	if count > 0 {
		o.ResetAfter = end - now
	}
	return o
}
