package measure

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"
)

// Micros formats d in microseconds, with a decimal below 10 µs.
func Micros(d time.Duration) string {
	if d < 10*time.Microsecond {
		return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64)
	}
	return strconv.FormatInt(d.Microseconds(), 10)
}

// Thousands formats x rounded, with thin groups: 12,345.
func Thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Median returns the median of v, the mean of the middle two when their
// number is even, and 0 for none. It sorts v.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// MedianRatio returns the median over rounds of a[i]/b[i], skipping rounds
// where b[i] is not positive, and false when no round is left. The load
// that other work puts on a shared machine changes from round to round
// and moves a and b alike within one, so this ratio moves least.
func MedianRatio(a, b []float64) (float64, bool) {
	var ratios []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			ratios = append(ratios, a[i]/b[i])
		}
	}
	if len(ratios) == 0 {
		return 0, false
	}
	return Median(ratios), true
}

// CheckLoopback refuses any address but one on this machine, named by
// the flag it came from: the load generators are load generators.
func CheckLoopback(flagName, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-%s: %w", flagName, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-%s: %s is not a loopback address", flagName, addr)
}
