package ratekeeper

import (
	"sort"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// SlidingWindowLog allows Limit requests in any rolling Window, exactly:
// it records every admitted request with its time and cost (in Redis, a
// sorted set) and sums the costs of those younger than Window. It never
// admits a burst across a window boundary, at the price of memory and time
// that grow with the number of requests in the window, at most Limit; for
// large limits prefer SlidingWindowCounter or GCRA. A Charge into a window
// that already holds Limit entries adds to its newest, which then counts
// from the Charge's time, so that a debt never grows the log past Limit
// entries; a Refund takes its units back from the newest entries.
type SlidingWindowLog struct {
	// Limit is the total cost allowed in any window. 1 to MaxLogLimit.
	Limit int64
	// Window is the length of the rolling window, in whole microseconds.
	Window time.Duration
}

// Spec validates the policy and returns its integer form: Params holds
// Limit and Window in microseconds.
func (p SlidingWindowLog) Spec() (driver.Spec, error) {
	return windowSpec(driver.AlgorithmSlidingWindowLog, "SlidingWindowLog", MaxLogLimit, p.Limit, p.Window, checkSlidingWindowLog)
}

func init() {
	driver.Register(driver.AlgorithmSlidingWindowLog, driver.Algorithm{Check: checkSlidingWindowLog, Step: stepSlidingWindowLog, Short: "swl"})
}

// checkSlidingWindowLog checks a sliding window log's Spec, whose limit is
// at most MaxLogLimit, and returns its Window.
func checkSlidingWindowLog(s *driver.Spec) (int64, error) {
	if s.Limit > MaxLogLimit {
		return 0, boundError("SlidingWindowLog", "Limit", driver.BoundMax, MaxLogLimit, "%d is above %d", s.Limit, MaxLogLimit)
	}
	return checkWindow(s)
}

// logEntry is an entry of a sliding window log: the requests admitted at
// one microsecond, at, of a total cost, after start units (modulo logSpan)
// admitted before them. The starts make the cost of a run of entries a
// difference of two of them, so the script reads the oldest entry and the
// newest, not the ones between.
type logEntry struct{ at, start, cost int64 }

// logEntries is a log, kept in State.More as a *logEntries.
type logEntries []logEntry

// Clone copies the log, for driver.State.Clone.
func (l *logEntries) Clone() any {
	c := append(logEntries(nil), *l...)
	return &c
}

// logSpan is the modulus of the starts: far above any cost in a window,
// and low enough that start plus cost stays exact in a double.
const logSpan = 1_000_000_000_000_000

// logDrop is the most entries out of the window that one call drops, so
// that no call does much more work than another (the script's log_drop).
const logDrop = 1000

// logUpTo returns the cost of the entries from first to e, inclusive.
func logUpTo(first, e logEntry) int64 {
	return (e.start + e.cost - first.start + logSpan) % logSpan
}

// stepSlidingWindowLog is the model that redisstore's
// sliding_window_log.lua keeps. State: the entries of admitted requests,
// in time order, in st.More as a *logEntries; an entry admitted at t
// counts until t + Window.
func stepSlidingWindowLog(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	limit, window := p.Capacity, p.Interval
	var log []logEntry
	logp, _ := st.More.(*logEntries)
	if st.Live && logp != nil {
		log = *logp
	}
	// Every call drops the entries out of the window, at most logDrop of
	// them, as the script does: the rest count for nothing until a later
	// call drops them. Dropping on peeks and denials too keeps the model's
	// entries the script's, even when the clock then steps back.
	gone := 0
	for gone < len(log) && log[gone].at <= now-window {
		gone++
	}
	if dropped := min(gone, logDrop); dropped > 0 {
		log = log[:copy(log, log[dropped:])]
		*logp = log
		gone -= dropped
	}
	kept := log[gone:]
	var used int64 // the cost in the window
	if len(kept) > 0 {
		used = logUpTo(kept[0], kept[len(kept)-1])
	}
	need := want(n)
	allowed := used+need <= limit
	var capped bool
	switch {
	case mode == driver.Refund:
		log = refundLog(log, gone, n)
		kept = log[gone:]
		used = max(used-n, 0)
		if len(log) == 0 {
			*st = state{}
		} else {
			*logp = log
		}
		need = 1
		allowed = used+need <= limit
	case mode == driver.Charge || allowed && mode == driver.Take:
		take := n
		if mode == driver.Charge {
			// Up to the debt's bound; a log of Limit entries adds to its
			// newest, so that it never holds more than Limit entries.
			take = max(min(n, limit+windowMaxDebt-used), 0)
			capped, need = take < n, 1
		}
		if logp == nil {
			logp = new(logEntries)
			st.More = logp
		}
		switch last := len(log) - 1; {
		case take == 0:
		case last >= 0 && (log[last].at >= now || len(kept) >= int(limit)):
			// The same microsecond, or the clock went back, or a log in
			// debt: one entry, so that entries stay in time order.
			log[last].at = max(log[last].at, now)
			log[last].cost += take
		default:
			var start int64
			if last >= 0 {
				start = (log[last].start + log[last].cost) % logSpan
			}
			log = append(log, logEntry{now, start, take})
		}
		kept = log[gone:]
		used += take
		*logp, st.Live = log, true
	}
	var retryAfter, resetAfter int64
	if !allowed || mode == driver.Charge && used+need > limit {
		// Wait until enough of the oldest entries have left: the first
		// that covers the excess with those before it. It is at most the
		// excess-th, as every entry costs at least 1.
		excess := used + need - limit
		i := sort.Search(len(kept), func(i int) bool { return logUpTo(kept[0], kept[i]) >= excess })
		retryAfter = kept[i].at + window - now
	}
	if len(kept) > 0 {
		resetAfter = kept[len(kept)-1].at + window - now
	}
	return outcome{Allowed: allowed, Remaining: (limit - used) * unit, RetryAfter: retryAfter, ResetAfter: resetAfter, Capped: capped}
}

// refundLog takes n units back from the newest entries of log still in
// the window (from gone on): an entry left with no cost goes.
func refundLog(log []logEntry, gone int, n int64) []logEntry {
	for n > 0 && len(log) > gone {
		last := &log[len(log)-1]
		if last.cost > n {
			last.cost -= n
			break
		}
		n -= last.cost
		log = log[:len(log)-1]
	}
	return log
}
