package ratekeeper

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestLeakyBucketRates checks the integer form of leak rates from one per
// MaxPeriod to MaxLimit per second: each is accepted, and the drain time
// of one request, unit/rate µs, is the exact 10^6/LeakRate µs rounded up
// by less than a microsecond (GCRA's rule: never looser).
func TestLeakyBucketRates(t *testing.T) {
	type policy = LeakyBucket
	cases := []policy{
		{10, 1.0 / 3600},
		{10, 1.0 / 1800},
		{10, 0.0014},
		{3, 0.7},
		{1, 1 / MaxPeriod.Seconds()},
		{MaxLeakyCapacity, MaxLeakyCapacity / MaxPeriod.Seconds()},
		{1, MaxLimit},
		{MaxLeakyCapacity, MaxLimit},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		capacity := int64(math.Pow(10, 6*r.Float64()))
		// Log-uniform from capacity per MaxPeriod to MaxLimit per second.
		lo, hi := math.Log(float64(capacity)/MaxPeriod.Seconds()), math.Log(MaxLimit)
		cases = append(cases, policy{capacity, math.Exp(lo + (hi-lo)*r.Float64())})
	}
	for _, p := range cases {
		s, err := p.Spec()
		if err != nil {
			t.Errorf("%+v: %v", p, err)
			continue
		}
		rate, unit := s.Params.Rate, s.Params.Cost
		exact := new(big.Rat).Quo(big.NewRat(1_000_000, 1), new(big.Rat).SetFloat64(p.LeakRate))
		kept := big.NewRat(unit, rate)
		over, _ := new(big.Rat).Sub(kept, exact).Float64()
		if over < 0 || over >= 1 {
			t.Errorf("%+v: one request drains in %d/%dµs, %gµs more than the exact %sµs", p, unit, rate, over, exact.FloatString(6))
		}
	}
}

// TestLeakyBucketTooSlow checks that a rate under which a full bucket
// would take longer than MaxPeriod to drain is an error.
func TestLeakyBucketTooSlow(t *testing.T) {
	for _, p := range []LeakyBucket{
		{1, 0.5 / MaxPeriod.Seconds()},
		{10, 5 / MaxPeriod.Seconds()},
		{MaxLeakyCapacity, MaxLeakyCapacity / MaxPeriod.Seconds() / 1.001},
		{1, math.SmallestNonzeroFloat64},
	} {
		if _, err := p.Spec(); err == nil {
			t.Errorf("%+v: accepted", p)
		}
	}
}
