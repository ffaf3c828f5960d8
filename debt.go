package ratekeeper

import "math/bits"

// Costs known afterwards: Limiter.Charge always takes its cost, and may
// leave a key in debt, which time repays; Limiter.Refund gives back. The
// models below keep every value of a debt exact in a double, as the
// scripts need, by bounding it (see docs/algorithms.md for each bound).

// floorDiv returns ⌊a/b⌋ for b > 0, as Lua's math.floor(a / b).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// mulDivRem returns q = ⌊a·b/c⌋ and r = a·b − q·c for a, b >= 0, c > 0,
// where a·b may overflow 64 bits: the script's muldiv. A q that would
// pass 2^62 comes back as 2^62, far above any value it is compared with.
func mulDivRem(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1 << 62, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq >= 1<<62 {
		return 1 << 62, 0
	}
	return int64(uq), int64(ur)
}

// windowMaxDebt is the largest debt of a window's count, in requests: the
// count stays within Limit + MaxLimit < 2^31, where the scripts' muldiv
// and every count times a million stay exact.
const windowMaxDebt = MaxLimit

// chargeCount adds n to a window's count, up to limit + windowMaxDebt
// (never lowering a count already above it), and reports whether it was
// capped. limit is the count at which a debt begins: a fixed window's
// Limit; for the sliding window counter, Limit less the previous window's
// weight, so that its estimate's debt keeps the same bound.
func chargeCount(count, n, limit int64) (int64, bool) {
	most := max(limit+windowMaxDebt, count)
	if count+n > most {
		return most, true
	}
	return count + n, false
}
