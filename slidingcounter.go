package ratekeeper

import (
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// SlidingWindowCounter allows about Limit requests in any rolling Window,
// with the memory of a fixed window: it counts requests in windows aligned
// to the clock, and weighs the previous window's count by the share of it
// still inside the rolling window. The estimate assumes the previous
// window's requests were spread evenly. When they came at its very end, it
// admits up to almost twice Limit in one rolling window (2·Limit − 1, as
// tested); on steadier traffic it admits about as many as an exact log,
// more or fewer. It smooths FixedWindow's bursts at the cost of one small
// key; use SlidingWindowLog for an exact bound.
type SlidingWindowCounter struct {
	// Limit is the number of requests allowed per window. 1 to MaxLimit.
	Limit int64
	// Window is the length of a window, in whole microseconds.
	Window time.Duration
}

// Spec validates the policy and returns its integer form: Params holds
// Limit and Window in microseconds.
func (p SlidingWindowCounter) Spec() (driver.Spec, error) {
	return windowSpec(driver.AlgorithmSlidingWindowCounter, "SlidingWindowCounter", MaxLimit, p.Limit, p.Window, checkWindow)
}

func init() {
	driver.Register(driver.AlgorithmSlidingWindowCounter, driver.Algorithm{Check: checkWindow, Step: stepSlidingWindowCounter, Short: "swc"})
}

// stepSlidingWindowCounter is the model that redisstore's
// sliding_window_counter.lua keeps. State: v[0] the start of the current
// window (a multiple of Window), v[1] the previous window's count, v[2] the
// current window's; a count above Limit holds a debt. The estimate at
// offset r into the window is prev·(Window−r)/Window + curr, compared
// exactly in integers.
func stepSlidingWindowCounter(p driver.Params, st *state, now, n int64, mode driver.Mode) outcome {
	limit, window := p.Capacity, p.Interval
	start := now - now%window
	var prev, curr int64
	if st.Live {
		switch {
		case st.V[0] >= start: // this window (or the clock went back)
			start, prev, curr = st.V[0], st.V[1], st.V[2]
		case st.V[0] == start-window:
			prev = st.V[2]
		}
	}
	r := max(now-start, 0)
	need := want(n)
	// ⌈prev·(window−r)/window⌉: the previous window's weight, rounded up,
	// which is exact for comparing with whole requests.
	weighted := prev - mulDiv(prev, r, window)
	allowed := slidingCounterFits(curr, weighted, need, limit)
	var capped bool
	switch {
	case mode == driver.Charge:
		// The debt is the estimate's, curr + weighted, beyond limit.
		curr, capped = chargeCount(curr, n, limit-weighted)
		st.Live, st.V = true, [3]int64{start, prev, curr}
		need = 1
	case mode == driver.Refund:
		if prev+curr > 0 {
			// The current window's count first, then the previous one's.
			back := min(n, curr)
			curr -= back
			prev = max(prev-(n-back), 0)
			weighted = prev - mulDiv(prev, r, window)
			st.V = [3]int64{start, prev, curr}
			if prev+curr == 0 {
				*st = state{}
			}
		}
		need = 1
		allowed = slidingCounterFits(curr, weighted, need, limit)
	case allowed && mode == driver.Take:
		curr += n
		st.Live, st.V = true, [3]int64{start, prev, curr}
	}
	var retryAfter, resetAfter int64
	if !allowed || mode == driver.Charge && !slidingCounterFits(curr, weighted, need, limit) {
		retryAfter = slidingCounterRetry(limit, window, start, now, prev, curr, need)
	}
	switch {
	case curr > 0:
		resetAfter = start + 2*window - now
	case prev > 0:
		resetAfter = start + window - now
	}
	// Below zero by a debt (or while a clock gone back weighs prev more,
	// at most −windowMaxDebt, as a debt).
	remaining := max(limit-curr-weighted, -windowMaxDebt)
	return outcome{Allowed: allowed, Remaining: remaining * unit, RetryAfter: retryAfter, ResetAfter: resetAfter, Capped: capped}
}

// slidingCounterFits reports whether a request of cost need fits beside
// the current window's count and the previous one's weight.
func slidingCounterFits(curr, weighted, need, limit int64) bool {
	room := limit - curr - need
	return room >= 0 && weighted <= room
}

// slidingCounterRetry is the time until a request of cost need could pass.
func slidingCounterRetry(limit, window, start, now, prev, curr, need int64) int64 {
	room := limit - curr - need
	// The first offset at which prev's weight fits in room, if it comes
	// in this window; else the first in the next, where curr is prev.
	at := window
	if room >= 0 {
		at = window - mulDiv(room, window, prev)
	}
	if at < window {
		return start + at - now
	}
	at = 0
	if spare := limit - need; curr > spare {
		at = window - mulDiv(spare, window, curr)
	}
	return start + window + at - now
}
