// Package measure holds what the load generators share: a latency
// histogram, readings of Redis's INFO, medians of per-round ratios and
// the formatting of their figures.
package measure

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split
// into 2^subBits buckets, so a bucket is at most 1/64 (1.6%) wide.
const subBits = 6

// Histogram counts durations in log-linear buckets: fixed memory and
// constant-time recording, however many decisions a run makes. Its zero
// value is empty and ready to use.
type Histogram struct {
	counts [(64 - subBits) << subBits]uint64
	n      uint64
}

func bucketOf(v uint64) int {
	if v < 1<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return (shift+1)<<subBits + int(v>>shift) - 1<<subBits
}

// bucketMid returns the middle of bucket i.
func bucketMid(i int) uint64 {
	if i < 1<<subBits {
		return uint64(i)
	}
	shift := i>>subBits - 1
	low := uint64(i&(1<<subBits-1)+1<<subBits) << shift
	return low + (uint64(1)<<shift)/2
}

// Record counts d.
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// Quantile returns the duration below which a fraction q of the recorded
// durations fall, 0 when none were.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			return time.Duration(bucketMid(i))
		}
	}
	return 0
}
