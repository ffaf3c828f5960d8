package drivertest

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// testSlidingWindowLogClockStepBack: 5 per 5 s; 3 admitted at T, the clock
// steps back 10 s (a failover to a replica whose clock lags), then forward
// again. The requests admitted behind must not leave before those of T:
// nothing more passes until T + 5 s.
func (ts *suite) testSlidingWindowLogClockStepBack(t *testing.T) {
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.SlidingWindowLog{Limit: 5, Window: 5 * sec})
		forget(t, lim, "k")
		admitted := 0
		allow := func(what string, n int64) {
			t.Helper()
			res, err := lim.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if res.Allowed {
				admitted += int(n)
			}
		}
		allow("3 at T", 3)
		clock.Advance(-10 * sec)
		allow("2 at T-10s", 2)
		allow("1 more at T-10s", 1)
		clock.Advance(10*sec + 500*ms)
		allow("2 at T+0.5s", 2)
		clock.Advance(time.Second)
		allow("1 at T+1.5s", 1)
		if admitted != 5 {
			t.Fatalf("%d admitted within 1.5 s of real time, at most 5 per 5 s", admitted)
		}
		// The entries count until T + 5 s, all of them.
		clock.Advance(3500*ms - 1)
		if res, err := lim.Peek(ctx, "k"); err != nil || res.Allowed || res.RetryAfter != time.Microsecond {
			t.Fatalf("Peek at T+5s-1µs: %+v, %v; want denied for 1µs", res, err)
		}
		clock.Advance(1)
		if res, err := lim.AllowN(ctx, "k", 5); err != nil || !res.Allowed {
			t.Fatalf("AllowN(5) at T+5s: %+v, %v; want allowed", res, err)
		}
	})
}

// expiryFloor keeps the step backs of a controlled clock from crossing
// back over a time at which a key's state was full again and a request
// saw it so. A store may then forget the state, as an expiry does; the
// model keeps it. Either is as good as fresh from that time on, but not
// before it.
type expiryFloor struct {
	expires []int64 // per policy: when its state is full again; 0: never set
	floor   int64
}

// before records a request at now, before it is made.
func (f *expiryFloor) before(now int64) {
	for _, e := range f.expires {
		if e != 0 && now >= e {
			f.floor = max(f.floor, e)
		}
	}
}

// after records the Result of a request of cost n made at now in mode:
// one that wrote the key's state (an allowed take, any charge or refund).
func (f *expiryFloor) after(now, n int64, mode driver.Mode, res ratekeeper.Result) {
	if n == 0 || mode == driver.Take && !res.Allowed {
		return
	}
	parts := res.Parts
	if parts == nil {
		parts = []ratekeeper.Result{res}
	}
	if f.expires == nil {
		f.expires = make([]int64, len(parts))
	}
	for i, p := range parts {
		f.expires[i] = now + p.ResetAfter.Microseconds()
	}
}

// back returns how far the clock, at now, may step back towards d < 0.
func (f *expiryFloor) back(now int64, d time.Duration) time.Duration {
	return max(d, time.Duration(f.floor-now)*time.Microsecond)
}

// testClockStepBack runs every policy on the store under a clock that
// steps back, never ahead of real time. The store must return the
// model's Results. When the clock only steps back and then runs on (a
// failover to a server whose clock lags), no span of real time as long as
// a policy's Window admits more than the policy admits in such a span of
// a clock that never goes back. When it also returns (two application
// servers whose supplied clocks disagree, or a failover and back), the
// store still agrees with the model, request by request.
func (ts *suite) testClockStepBack(t *testing.T) {
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			for _, returns := range []bool{false, true} {
				t.Run(map[bool]string{false: "lags", true: "returns"}[returns], func(t *testing.T) {
					ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
						checkStepBack(t, clock, newLimiter(t, store, pc.policy), pc.quantum, returns)
					})
				})
			}
		})
	}
}

func checkStepBack(t *testing.T, clock *testutil.Clock, lim *ratekeeper.Limiter, quantum time.Duration, returns bool) {
	ctx := context.Background()
	forget(t, lim, "k")
	spec := lim.Spec()
	var window time.Duration
	for _, p := range spec.Policies() {
		window = max(window, p.Window())
	}
	m := testutil.NewModel(spec)
	var floor expiryFloor
	r := rand.New(rand.NewPCG(11, 0))
	// The clock lags real time by lag: it steps back by up to three
	// windows at a time and, if it returns, forward to real time again.
	var real, lag time.Duration
	type admission struct {
		real time.Duration
		n    int64
	}
	var admitted []admission
	allowed, denied := 0, 0
	for i := range 800 {
		if r.IntN(8) == 0 {
			step := lag // forward, to real time
			if lag == 0 || !returns {
				step = -time.Duration(1+r.Int64N(int64(3*window/time.Microsecond))) * time.Microsecond
				step = floor.back(clock.Now().UnixMicro(), step)
			}
			clock.Advance(step)
			lag -= step
		}
		span := quantum
		if r.IntN(2) == 0 {
			span = window / 10
		}
		dt := time.Duration(r.Int64N(int64(span/time.Microsecond)+1)) * time.Microsecond
		real += dt
		clock.Advance(dt)
		// A few requests, until one is denied.
		for range 1 + r.IntN(4) {
			n := 1 + r.Int64N(min(spec.MaxCost(), 3))
			switch r.IntN(5) {
			case 0:
				n = 0
			case 1:
				n = r.Int64N(spec.MaxCost() + 1)
			}
			now := clock.Now().UnixMicro()
			floor.before(now)
			want := m.Decide(now, n)
			got, err := lim.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatalf("request %d: AllowN(%d): %v", i, n, err)
			}
			if testutil.DiffResult(got, want) != "" {
				t.Fatalf("request %d: AllowN(%d) at real %v, %v behind:\nstore %+v\nmodel %+v", i, n, real, lag, got, want)
			}
			floor.after(now, n, driver.Take, got)
			if !got.Allowed {
				denied++
				break
			}
			allowed++
			if n > 0 {
				admitted = append(admitted, admission{real, n})
			}
		}
	}
	if allowed == 0 || denied == 0 {
		t.Fatalf("%d allowed, %d denied: the requests do not exercise the policy", allowed, denied)
	}
	if returns {
		return
	}
	for _, p := range spec.Policies() { // every policy of an All admitted them all
		bound := stepBackBound(p)
		for i, a := range admitted {
			var sum int64
			for _, b := range admitted[i:] {
				if b.real >= a.real+p.Window() {
					break
				}
				sum += b.n
			}
			if sum > bound {
				t.Fatalf("%s: %d admitted in %v of real time from %v, more than %d", p.Name(), sum, p.Window(), a.real, bound)
			}
		}
	}
}

// stepBackBound is the most a policy admits within its Window of a clock
// that never goes back.
func stepBackBound(spec *driver.ValidSpec) int64 {
	switch spec.Algorithm() {
	case driver.AlgorithmSlidingWindowLog:
		return spec.Limit()
	case driver.AlgorithmTokenBucket:
		// Full, plus a refill at each step within the Window:
		// ⌈Capacity / RefillRate⌉ of them.
		capacity, rate := spec.Params().Capacity, spec.Params().Rate
		return (capacity + (capacity+rate-1)/rate*rate) / driver.Unit
	default:
		// GCRA and the leaky bucket: a burst, then the Window's rate;
		// the fixed window and the counter: two windows' worth.
		return 2 * spec.Limit()
	}
}

// testTimeOutOfRange: a clock before 1970 (Go's zero time among them), at
// the Unix epoch, or from 2200 on is an error matching ErrInvalidTime on
// every algorithm, and takes nothing; the last microseconds of
// 2199 decide, and limit.
func (ts *suite) testTimeOutOfRange(t *testing.T) {
	last := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Hour)
	for _, pc := range policies {
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
				ctx := context.Background()
				lim := newLimiter(t, store, pc.policy)
				forget(t, lim, "k")
				for _, at := range []time.Time{
					{}, time.Unix(-1, 0), time.Unix(0, 0),
					time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC),
				} {
					clock.Advance(at.Sub(clock.Now()))
					for _, n := range []int64{0, 1} {
						res, err := lim.AllowN(ctx, "k", n)
						if !errors.Is(err, ratekeeper.ErrInvalidTime) || testutil.DiffResult(res, ratekeeper.Result{}) != "" {
							t.Fatalf("AllowN(%d) at %v: %+v, %v; want an error matching ErrInvalidTime", n, at, res, err)
						}
					}
				}
				// Close to the end: the policy limits, as anywhere.
				clock.Advance(last.Sub(clock.Now()))
				maxCost := lim.Spec().MaxCost()
				if res, err := lim.AllowN(ctx, "k", maxCost); err != nil || !res.Allowed {
					t.Fatalf("AllowN(%d) at %v: %+v, %v; want allowed", maxCost, last, res, err)
				}
				if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed {
					t.Fatalf("Allow at %v after AllowN(%d): %+v, %v; want denied", last, maxCost, res, err)
				}
			})
		})
	}
}
