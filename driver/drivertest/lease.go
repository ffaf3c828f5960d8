package drivertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// Leases, for a store that is a driver.Leaser.

const leaseSteps = 4000

// testLeaseEquivalence requires the store to return the Go model's lease
// and Result for every step of long random sequences of lease steps
// (taking leases of random sizes and TTLs, giving back earlier ones with
// random unused units, both at once), mixed with takes, charges and
// refunds, on a clock that now and then steps back, for every policy
// that takes leases; each sequence must take leases, be denied some, give
// some back and let some expire, so that none passes vacuously.
func (ts *suite) testLeaseEquivalence(t *testing.T) {
	for _, pc := range policies {
		spec, err := testutil.SpecOf(pc.policy)
		if err != nil {
			t.Fatal(err)
		}
		if !spec.Leases() || spec.MaxCost() < 4 {
			// A lease takes at most half of what is there, its
			// request's own cost included: below 4, it holds nothing.
			continue
		}
		t.Run(pc.name, func(t *testing.T) {
			t.Parallel()
			for _, seed := range runSeeds() {
				t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { ts.checkLeaseEquivalence(t, pc, seed) })
			}
		})
	}
}

func (ts *suite) checkLeaseEquivalence(t *testing.T, pc policyCase, seed uint64) {
	ctx := context.Background()
	const key = "k"
	clock := newClock()
	store := ts.open(t, clock.Now)
	leaser, ok := store.(driver.Leaser)
	if !ok {
		t.Skip("the store is no driver.Leaser: it takes no leases")
	}
	_, charges := store.(driver.Charger)
	lim := newLimiter(t, store, pc.policy)
	forget(t, lim, key)
	spec := lim.Spec()
	m := testutil.NewModel(spec)
	g := newStepGen(seed, pc, spec)
	r := rand.New(rand.NewPCG(seed, 3))
	var floor expiryFloor
	var held []driver.Lease // leases taken and not yet given back
	var counts struct{ leased, ahead, denied, givenBack, expired, takes int }
	for i := range leaseSteps {
		d, n := g.next()
		if r.IntN(40) == 0 {
			d = floor.back(clock.Now().UnixMicro(), -g.fraction(g.window))
		}
		clock.Advance(d)
		now := clock.Now().UnixMicro()
		floor.before(now)
		before := m.String()
		what := fmt.Sprintf("seed %d, step %d, %+v at start+%v, from %s", seed, i, pc.policy, clock.Elapsed(), before)
		switch p := r.IntN(100); {
		case p < 45 || p < 60 && len(held) > 0:
			req := driver.LeaseRequest{}
			if p < 45 {
				least := max(n, 1)
				req.Min = least
				req.Want = least + r.Int64N(spec.MaxCost()-least+1)
				if r.IntN(5) == 0 {
					req.Min = 0 // a lease ahead of any request
				}
				req.TTL = 1 + r.Int64N(min(g.window.Microseconds(), int64(driver.MaxLeaseTTL/time.Microsecond)))
			}
			if len(held) > 0 && r.IntN(2) == 0 {
				j := r.IntN(len(held))
				req.Back = held[j]
				req.Unused = r.Int64N(req.Back.Units + 1)
				held = append(held[:j], held[j+1:]...)
				if req.Back.Expires <= now {
					counts.expired++
				} else {
					counts.givenBack++
				}
			}
			wantLease, want := m.Lease(now, req)
			grant, err := leaser.Lease(ctx, key, spec, req)
			if err != nil {
				t.Fatalf("%s: lease %+v: %v", what, req, err)
			}
			got, err := lim.ResultOf(grant.Decision)
			if err != nil {
				t.Fatal(err)
			}
			wantLasts := int64(0)
			if wantLease.Units > 0 {
				wantLasts = wantLease.Expires - now
			}
			if grant.Lease != wantLease || grant.Lasts != wantLasts || testutil.DiffResult(got, want) != "" {
				t.Fatalf("%s: lease %+v:\nmodel %+v %+v\nstore %+v %+v", what, req, wantLease, want, grant.Lease, got)
			}
			switch {
			case req.Want > 0 && !got.Allowed:
				counts.denied++
			case grant.Units > 0:
				counts.leased++
				if req.Min == 0 {
					counts.ahead++
				}
				held = append(held, grant.Lease)
				if len(held) > 4 {
					held = held[1:] // never given back: left to expire
				}
			}
			floor.after(now, max(req.Want, req.Unused), driver.Charge, got)
		case p < 75 && charges:
			mode, n := driver.Charge, r.Int64N(2*spec.MaxCost()+1)
			if r.IntN(2) == 0 {
				mode = driver.Refund
			}
			want := m.DecideMode(now, n, mode)
			got, err := costCall(lim, mode)(ctx, key, n)
			if err != nil || testutil.DiffResult(got, want) != "" {
				t.Fatalf("%s: %v(%d) = %+v, %v; model %+v", what, mode, n, got, err, want)
			}
			floor.after(now, n, mode, want)
		default:
			want := m.Decide(now, n)
			got, err := lim.AllowN(ctx, key, n)
			if err != nil || testutil.DiffResult(got, want) != "" {
				t.Fatalf("%s: AllowN(%d) = %+v, %v; model %+v", what, n, got, err, want)
			}
			if want.Allowed && n > 0 {
				counts.takes++
			}
			floor.after(now, n, driver.Take, want)
		}
	}
	if counts.leased == 0 || counts.ahead == 0 || counts.denied == 0 || counts.givenBack == 0 || counts.expired == 0 || counts.takes == 0 {
		t.Fatalf("seed %d: %+v: the random steps do not exercise the leases of %+v", seed, counts, pc.policy)
	}
}

// testLeaseRetryAfter: while a lease holds part of a GCRA's burst, a
// request that fits only beside less than it holds waits for the lease to
// expire, and its RetryAfter says so, exactly.
func (ts *suite) testLeaseRetryAfter(t *testing.T) {
	ts.forEachStore(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		leaser, ok := store.(driver.Leaser)
		if !ok {
			t.Skip("the store is no driver.Leaser: it takes no leases")
		}
		ctx := context.Background()
		lim := newLimiter(t, store, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10})
		forget(t, lim, "k")
		// Half of the 10 that fit: 1 for the request, 4 held for a second.
		g, err := leaser.Lease(ctx, "k", lim.Spec(), driver.LeaseRequest{Want: 10, Min: 1, TTL: time.Second.Microseconds()})
		if err != nil || !g.Allowed || g.Units != 4 || g.Lasts != time.Second.Microseconds() {
			t.Fatalf("lease of up to 10 = %+v, %v; want 4 held for 1s", g, err)
		}
		// 5 of 10 are taken, 4 of them held: 7 fits only once the hold
		// has expired (at 1s) and the 5 have drained to 3 (at 1.1s).
		res, err := lim.AllowN(ctx, "k", 7)
		if err != nil || res.Allowed || res.RetryAfter != 1100*time.Millisecond || res.Remaining != 5 {
			t.Fatalf("AllowN(7) beside the lease = %+v, %v; want denied for 1.1s, 5 left", res, err)
		}
		clock.Advance(res.RetryAfter - time.Microsecond)
		if res, err := lim.AllowN(ctx, "k", 7); err != nil || res.Allowed {
			t.Fatalf("AllowN(7) a µs before its RetryAfter = %+v, %v; want denied", res, err)
		}
		clock.Advance(time.Microsecond)
		if res, err := lim.AllowN(ctx, "k", 7); err != nil || !res.Allowed {
			t.Fatalf("AllowN(7) at its RetryAfter = %+v, %v; want allowed", res, err)
		}
	})
}
