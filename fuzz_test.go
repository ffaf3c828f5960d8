package ratekeeper_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// FuzzTokenBucket drives the token bucket model with arbitrary parameters,
// time steps and costs: no panic, every Result within bounds, and never
// more admitted than the capacity plus what the elapsed refills allow.
func FuzzTokenBucket(f *testing.F) {
	f.Add(int64(10), 1.0, int64(1_000_000), []byte{0, 0, 1, 3, 1, 10, 2, 200, 5})
	f.Add(int64(3), 0.3, int64(1), []byte{1, 9, 3, 4, 2, 2, 5, 7, 0})
	f.Add(int64(1), 0.1, int64(60_000_000), []byte{3, 10, 1, 4, 10, 1})
	f.Fuzz(func(t *testing.T, capacity int64, rate float64, intervalMicros int64, ops []byte) {
		p := ratekeeper.TokenBucket{Capacity: capacity, RefillRate: rate,
			RefillInterval: time.Duration(intervalMicros) * time.Microsecond}
		spec, err := testutil.SpecOf(p)
		if err != nil {
			if !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
				t.Fatalf("Spec() error %v does not wrap ErrInvalidPolicy", err)
			}
			return
		}
		if intervalMicros > 1<<40 { // Duration overflowed into a valid value
			return
		}
		lim := testutil.LimiterOf(spec)
		start := int64(1_900_000_000_000_000)
		now := start
		var st driver.State
		var admitted int64
		for i := 0; i+2 < len(ops); i += 3 {
			mode, x, c := ops[i]%6, int64(ops[i+1]), int64(ops[i+2])
			switch mode {
			case 1:
				now += x
			case 2:
				now += intervalMicros * x / 255
			case 3:
				now += intervalMicros * x
			case 4:
				now += max(intervalMicros*x-1, 0)
			case 5:
				now += spec.Window().Microseconds() * x
			}
			n := c % (capacity + 1)
			before := st
			res, _ := lim.ResultOf(driver.Decision{Outcome: spec.Step(&st, now, n, driver.Take)})
			if res.Remaining < 0 || res.Remaining > float64(res.Limit) || res.Limit != capacity {
				t.Fatalf("step %d: Remaining %v, Limit %d out of bounds", i/3, res.Remaining, res.Limit)
			}
			if res.RetryAfter < 0 || res.ResetAfter < 0 || res.ResetAfter > spec.Window() {
				t.Fatalf("step %d: RetryAfter %v, ResetAfter %v out of bounds (window %v)", i/3, res.RetryAfter, res.ResetAfter, spec.Window())
			}
			if res.Allowed == (res.RetryAfter > 0) {
				t.Fatalf("step %d: Allowed %v with RetryAfter %v", i/3, res.Allowed, res.RetryAfter)
			}
			if (res.Remaining < float64(res.Limit)) != (res.ResetAfter > 0) {
				t.Fatalf("step %d: Remaining %v of %d with ResetAfter %v", i/3, res.Remaining, res.Limit, res.ResetAfter)
			}
			if !res.Allowed || n == 0 {
				if !reflect.DeepEqual(st, before) {
					t.Fatalf("step %d: a denied request or a peek changed the state", i/3)
				}
				continue
			}
			admitted += n
			refills := float64((now-start)/intervalMicros+1) * rate
			if float64(admitted) > float64(capacity)+refills+1e-6 {
				t.Fatalf("step %d: admitted %d in %dµs, more than capacity %d plus %v refilled",
					i/3, admitted, now-start, capacity, refills)
			}
		}
	})
}
