package ratekeeper_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// countingStore counts the calls that reach a memstore.
type countingStore struct {
	*memstore.Store
	calls atomic.Int64
}

func (s *countingStore) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.calls.Add(1)
	return s.Store.Decide(ctx, key, spec, n)
}

func (s *countingStore) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.calls.Add(1)
	return s.Store.Charge(ctx, key, spec, n)
}

func (s *countingStore) Refund(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.calls.Add(1)
	return s.Store.Refund(ctx, key, spec, n)
}

// newBudget is a fixed window of 10,000 a minute on a counting memstore
// whose clock stands still.
func newBudget(t *testing.T) (*ratekeeper.Limiter, *countingStore) {
	t.Helper()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	store := &countingStore{Store: memstore.New(memstore.WithClock(func() time.Time { return at }), memstore.WithSweepInterval(0))}
	lim, err := ratekeeper.New(store, ratekeeper.FixedWindow{Limit: 10000, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return lim, store
}

func used(t *testing.T, lim *ratekeeper.Limiter, key string) float64 {
	t.Helper()
	res, err := lim.Peek(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return float64(res.Limit) - res.Remaining
}

// Settle charges what the request cost beyond its estimate, refunds what
// it did not use, and with the estimate exact makes no store call.
func TestReserveSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		actual int64
		calls  int64 // store calls made by Settle
	}{{1200, 1}, {700, 1}, {1000, 0}, {0, 1}} {
		lim, store := newBudget(t)
		r, err := lim.Reserve(ctx, "k", 1000)
		if err != nil || !r.Result().Allowed || r.Result().Remaining != 9000 {
			t.Fatalf("Reserve(1000) = %+v, %v; want allowed, 9000 left", r.Result(), err)
		}
		before := store.calls.Load()
		res, err := r.Settle(ctx, c.actual)
		if err != nil {
			t.Fatalf("Settle(%d): %v", c.actual, err)
		}
		if got := store.calls.Load() - before; got != c.calls {
			t.Errorf("Settle(%d) made %d store calls, want %d", c.actual, got, c.calls)
		}
		if want := float64(10000 - c.actual); res.Remaining != want {
			t.Errorf("Settle(%d) = %+v, want %v left", c.actual, res, want)
		}
		if u := used(t, lim, "k"); u != float64(c.actual) {
			t.Errorf("after Settle(%d) the key has used %v", c.actual, u)
		}
		if _, err := r.Settle(ctx, c.actual); !errors.Is(err, ratekeeper.ErrSettled) {
			t.Errorf("second Settle: %v, want ErrSettled", err)
		}
		if err := r.Cancel(ctx); !errors.Is(err, ratekeeper.ErrSettled) {
			t.Errorf("Cancel after Settle: %v, want ErrSettled", err)
		}
		if u := used(t, lim, "k"); u != float64(c.actual) {
			t.Errorf("after a second Settle and a Cancel the key has used %v, want %d", u, c.actual)
		}
	}
}

// A charge beyond what is left goes into debt.
func TestReserveSettleIntoDebt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, _ := newBudget(t)
	r, err := lim.Reserve(ctx, "k", 9500)
	if err != nil || !r.Result().Allowed {
		t.Fatalf("Reserve: %+v, %v", r, err)
	}
	res, err := r.Settle(ctx, 12000)
	if err != nil || res.Remaining != -2000 || res.Allowed {
		t.Fatalf("Settle(12000) = %+v, %v; want 2000 in debt, not fitted", res, err)
	}
}

// Cancel gives the whole estimate back, once; a reservation never settled
// keeps its estimate.
func TestReserveCancelAndUnsettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, _ := newBudget(t)
	r, err := lim.Reserve(ctx, "k", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Reserve(ctx, "k", 300); err != nil { // never settled
		t.Fatal(err)
	}
	if u := used(t, lim, "k"); u != 1300 {
		t.Fatalf("two reservations hold %v, want 1300", u)
	}
	if err := r.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel(ctx); !errors.Is(err, ratekeeper.ErrSettled) {
		t.Errorf("second Cancel: %v, want ErrSettled", err)
	}
	if _, err := r.Settle(ctx, 10); !errors.Is(err, ratekeeper.ErrSettled) {
		t.Errorf("Settle after Cancel: %v, want ErrSettled", err)
	}
	if u := used(t, lim, "k"); u != 300 {
		t.Errorf("after Cancel the key has used %v, want the unsettled 300", u)
	}
}

// A denied estimate takes nothing, and its Reservation settles nothing.
func TestReserveDenied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, _ := newBudget(t)
	if _, err := lim.AllowN(ctx, "k", 9500); err != nil {
		t.Fatal(err)
	}
	r, err := lim.Reserve(ctx, "k", 1000)
	if err != nil || r.Result().Allowed || r.Result().RetryAfter <= 0 {
		t.Fatalf("Reserve(1000) with 500 left = %+v, %v; want denied with a wait", r.Result(), err)
	}
	if _, err := r.Settle(ctx, 900); !errors.Is(err, ratekeeper.ErrNotReserved) {
		t.Errorf("Settle of a denied reservation: %v, want ErrNotReserved", err)
	}
	if err := r.Cancel(ctx); !errors.Is(err, ratekeeper.ErrNotReserved) {
		t.Errorf("Cancel of a denied reservation: %v, want ErrNotReserved", err)
	}
	if u := used(t, lim, "k"); u != 9500 {
		t.Errorf("after a denied reservation the key has used %v, want 9500", u)
	}
}

// Bad input is an error, and a bad actual cost leaves the reservation
// open; a store without charges refuses to reserve.
func TestReserveInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, _ := newBudget(t)
	if _, err := lim.Reserve(ctx, "k", -1); !errors.Is(err, ratekeeper.ErrInvalidCost) {
		t.Errorf("Reserve(-1): %v", err)
	}
	if _, err := lim.Reserve(ctx, "k", 10001); !errors.Is(err, ratekeeper.ErrCostTooHigh) {
		t.Errorf("Reserve(10001): %v", err)
	}
	if _, err := lim.Reserve(ctx, "", 1); !errors.Is(err, ratekeeper.ErrInvalidKey) {
		t.Errorf("Reserve with no key: %v", err)
	}
	r, err := lim.Reserve(ctx, "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Settle(ctx, -1); !errors.Is(err, ratekeeper.ErrInvalidCost) {
		t.Errorf("Settle(-1): %v", err)
	}
	if _, err := r.Settle(ctx, ratekeeper.MaxLimit+11); !errors.Is(err, ratekeeper.ErrInvalidCost) {
		t.Errorf("Settle(MaxLimit+11): %v", err)
	}
	if _, err := r.Settle(ctx, 4); err != nil {
		t.Errorf("Settle after bad input: %v, want it still open", err)
	}

	plain, err := ratekeeper.New(decideOnly{memstore.New()}, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Reserve(ctx, "k", 1); !errors.Is(err, ratekeeper.ErrNoCharges) {
		t.Errorf("Reserve on a store without charges: %v, want ErrNoCharges", err)
	}
	if res, _ := plain.Peek(ctx, "k"); res.Remaining != 5 {
		t.Errorf("a refused Reserve took something: %+v", res)
	}
}
