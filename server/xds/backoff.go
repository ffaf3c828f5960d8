package xds

import (
	"errors"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff paces the attempts to open a lost stream again, with the
// meaning envoyproxy/ratelimit gives its XDS_CLIENT_BACKOFF_* settings:
// attempt n (from 0) waits Initial * Factor^n, bounded by Initial and
// Max; with Jitter, a uniformly random time between Initial and that.
// envoy's default Factor, 0.5, so makes every attempt wait Initial.
// Attempts count from 0 again once a stream has carried a push.
type Backoff struct {
	// Initial is the shortest wait (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL);
	// 0 means 100 ms.
	Initial time.Duration
	// Max is the longest wait (XDS_CLIENT_BACKOFF_MAX_INTERVAL); 0 means
	// 10 s. An Initial at or above Max makes every wait Max.
	Max time.Duration
	// Factor multiplies the wait at each attempt
	// (XDS_CLIENT_BACKOFF_RANDOM_FACTOR, so named by envoy); 0 means 2.
	Factor float64
	// Jitter draws each wait at random below its bound
	// (XDS_CLIENT_BACKOFF_JITTER).
	Jitter bool
}

// DefaultBackoff is envoy's: 10 s, at most 60 s, factor 0.5, jitter.
func DefaultBackoff() Backoff {
	return Backoff{Initial: 10 * time.Second, Max: 60 * time.Second, Factor: 0.5, Jitter: true}
}

func (b Backoff) check() error {
	switch {
	case b.Initial < 0 || b.Max < 0:
		return errors.New("xds: a backoff interval is negative")
	case b.Factor < 0 || math.IsNaN(b.Factor) || math.IsInf(b.Factor, 0):
		return errors.New("xds: the backoff factor is negative or not a number")
	}
	return nil
}

// Duration is the wait before attempt n (from 0).
func (b Backoff) Duration(n int) time.Duration {
	lo, hi := b.Initial, b.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 10 * time.Second
	}
	if lo >= hi {
		return hi
	}
	f := b.Factor
	if f == 0 {
		f = 2
	}
	d := float64(lo) * math.Pow(f, float64(n))
	if b.Jitter && d > float64(lo) {
		d = float64(lo) + rand.Float64()*(d-float64(lo))
	}
	switch {
	case d >= float64(hi):
		return hi
	case d <= float64(lo):
		return lo
	}
	return time.Duration(d)
}
