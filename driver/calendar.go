package driver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A Period is the calendar period of a calendar window: a day, an ISO
// week (from Monday), a month or a year, in a time zone.
type Period int64

// The periods of calendar windows.
const (
	Day Period = iota + 1
	Week
	Month
	Year
)

// String returns the period's name: "day", "week", "month" or "year".
func (p Period) String() string {
	switch p {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("Period(%d)", int64(p))
}

// Longest returns the longest a period lasts, in microseconds, in any
// zone: its days, at most 366, plus two hours for the offset changes a
// zone may make within it.
func (p Period) Longest() int64 {
	days := map[Period]int64{Day: 1, Week: 7, Month: 31, Year: 366}[p]
	return (days*24 + 2) * int64(time.Hour/time.Microsecond)
}

// Calendar windows. A FixedWindow over calendar periods keeps its
// alignment parameter (Params.Rate) at AlignCalendar, the longest its
// period lasts in Params.Interval, and in Params.Cost the id of its
// calendar (CalendarID): its period and time zone, which only this
// process knows by that number. A store asks Calendar for the periods
// around the time a decision is made, and the model picks, as a script
// does with the server's clock, the one that contains the time it
// decides at.
const AlignCalendar = 2

// calendar is a period in a time zone.
type calendar struct {
	period Period
	loc    *time.Location
}

// calendars are the calendars made so far: ids, under mu, for
// CalendarID; list, by id − 1, for the readers of every decision, which
// take no lock.
var calendars struct {
	mu   sync.Mutex
	ids  map[calendarKey]int64
	list atomic.Pointer[[]calendar]
}

// calendarKey names a calendar: zones are known by name, so that the
// same zone loaded twice is one calendar.
type calendarKey struct {
	period Period
	zone   string
}

// CalendarID returns the id of period in loc (nil is UTC), made on first
// use: what a calendar window's Params.Cost holds. Two locations of the
// same name are one zone.
func CalendarID(period Period, loc *time.Location) int64 {
	if loc == nil {
		loc = time.UTC
	}
	calendars.mu.Lock()
	defer calendars.mu.Unlock()
	k := calendarKey{period, loc.String()}
	if id, ok := calendars.ids[k]; ok {
		return id
	}
	if calendars.ids == nil {
		calendars.ids = map[calendarKey]int64{}
	}
	var list []calendar
	if old := calendars.list.Load(); old != nil {
		list = *old
	}
	list = append(list[:len(list):len(list)], calendar{period, loc})
	calendars.list.Store(&list)
	id := int64(len(list))
	calendars.ids[k] = id
	return id
}

// CalendarOf returns the period and time zone of a calendar's id, and
// false for an id CalendarID never returned.
func CalendarOf(id int64) (Period, *time.Location, bool) {
	list := calendars.list.Load()
	if list == nil || id < 1 || id > int64(len(*list)) {
		return 0, nil, false
	}
	c := (*list)[id-1]
	return c.period, c.loc, true
}

// PeriodEnds are four consecutive ends of a calendar's periods, in
// microseconds since the Unix epoch: the period that contains a time t
// runs from PeriodEnds[1] to PeriodEnds[2]; the one before it from
// PeriodEnds[0], and the one after it to PeriodEnds[3]. A decision is made in whichever of
// the three contains the store's time, so that a store's clock up to a
// period away from its caller's still finds its period.
type PeriodEnds [4]int64

// CalendarEnds returns the ends of calendar id's periods around t
// (microseconds since the Unix epoch). Each period starts at midnight,
// local time, of its first day (or at the first instant of that day,
// where midnight is skipped), so a day lasts 23 or 25 hours across an
// offset change, and leap days and months of 28 to 31 days come out
// exact. It returns false for an unknown id.
func CalendarEnds(id, t int64) (PeriodEnds, bool) {
	period, loc, ok := CalendarOf(id)
	if !ok {
		return PeriodEnds{}, false
	}
	local := time.UnixMicro(t).In(loc)
	y, m, d := local.Date()
	switch period {
	case Week:
		d -= (int(local.Weekday()) + 6) % 7 // back to Monday
	case Month:
		d = 1
	case Year:
		m, d = time.January, 1
	}
	var b PeriodEnds
	for i := range b {
		k := i - 1
		var at time.Time
		switch period {
		case Day:
			at = time.Date(y, m, d+k, 0, 0, 0, 0, loc)
		case Week:
			at = time.Date(y, m, d+7*k, 0, 0, 0, 0, loc)
		case Month:
			at = time.Date(y, m+time.Month(k), 1, 0, 0, 0, 0, loc)
		default:
			at = time.Date(y+k, 1, 1, 0, 0, 0, 0, loc)
		}
		b[i] = at.UnixMicro()
	}
	return b, true
}

// Pick returns the start and the end of the period of b that contains
// now, and false if none does: the store's clock is more than a period
// away from its caller's.
func (b PeriodEnds) Pick(now int64) (start, end int64, ok bool) {
	for i := range 3 {
		if b[i] <= now && now < b[i+1] {
			return b[i], b[i+1], true
		}
	}
	return 0, 0, false
}

// String is the ends as a script takes them: "b0:b1:b2:b3".
func (b PeriodEnds) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", b[0], b[1], b[2], b[3])
}
