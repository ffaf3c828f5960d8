package ratekeeper

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
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

// TestLeakyBucketDocFigures checks the ticks docs/algorithms.md quotes
// for the leaky bucket against leakTicks.
func TestLeakyBucketDocFigures(t *testing.T) {
	doc, err := os.ReadFile("docs/algorithms.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	for _, tc := range []struct {
		capacity int64
		leakRate float64
		quote    string // where the doc states R, followed by " = R for"
	}{
		{5, 0.7, "at 0.7 per second (R"},
		{10, 10.0 / 3600, "at ten per hour (R"},
		{10, 1.0 / 3600, "at one per hour (R"},
	} {
		_, rate, ok := leakTicks(tc.capacity, tc.leakRate)
		if !ok {
			t.Fatalf("leakTicks(%d, %g) failed", tc.capacity, tc.leakRate)
		}
		want := fmt.Sprintf("%s = %s for", tc.quote, thousands(rate))
		if !strings.Contains(text, want) {
			t.Errorf("docs/algorithms.md lacks %q", want)
		}
		if !strings.Contains(text, fmt.Sprintf("%s = %s for %d)", tc.quote, thousands(rate), tc.capacity)) &&
			!strings.Contains(text, fmt.Sprintf("%s = %s for a `Capacity` of %d)", tc.quote, thousands(rate), tc.capacity)) {
			t.Errorf("docs/algorithms.md quotes R for another capacity than %d: want %q", tc.capacity, want)
		}
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
