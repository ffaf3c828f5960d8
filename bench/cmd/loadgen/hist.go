package main

import (
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power of two is split
// into 2^subBits buckets, so a bucket is at most 1/64 (1.6%) wide.
const subBits = 6

// histogram counts durations in log-linear buckets: fixed memory and
// constant-time recording, however many decisions a run makes.
type histogram struct {
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

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(uint64(max(d, 0)))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the duration below which a fraction q of the recorded
// durations fall.
func (h *histogram) quantile(q float64) time.Duration {
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
