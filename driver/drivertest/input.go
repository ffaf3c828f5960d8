package drivertest

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// testStoreChecksInput calls the store directly, as callers that bypass
// a Limiter do, with what a Limiter never passes on: each call is an
// error of driver's checks (see driver.CheckRequest), and takes nothing.
func (ts *suite) testStoreChecksInput(t *testing.T) {
	policies := []ratekeeper.Policy{
		ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 3},
		ratekeeper.All(
			ratekeeper.Named("a", ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 3}),
			ratekeeper.Named("b", ratekeeper.FixedWindow{Limit: 5, Window: time.Hour})),
	}
	for _, p := range policies {
		ts.forEachStore(t, func(t *testing.T, _ *testutil.Clock, store ratekeeper.Store) {
			ctx := context.Background()
			lim := newLimiter(t, store, p)
			spec := lim.Spec()
			forget(t, lim, "k")
			tooLong := strings.Repeat("k", driver.MaxKeyLen+1)
			for _, c := range []struct {
				key  string
				spec *driver.ValidSpec
				n    int64
				is   []error
				isnt error
			}{
				{"k", spec, -3, []error{driver.ErrInvalidCost}, driver.ErrCostTooHigh},
				{"k", spec, math.MinInt64, []error{driver.ErrInvalidCost}, driver.ErrCostTooHigh},
				{"k", spec, spec.MaxCost() + 1, []error{driver.ErrInvalidCost, driver.ErrCostTooHigh}, nil},
				{"k", spec, math.MaxInt64, []error{driver.ErrInvalidCost, driver.ErrCostTooHigh}, nil},
				{"", spec, 1, []error{driver.ErrInvalidKey}, driver.ErrInvalidCost},
				{"", spec, 0, []error{driver.ErrInvalidKey}, driver.ErrInvalidCost},
				{tooLong, spec, 1, []error{driver.ErrInvalidKey}, driver.ErrInvalidCost},
				{"k", nil, 1, []error{driver.ErrInvalidSpec}, driver.ErrInvalidKey},
				{"k", new(driver.ValidSpec), 1, []error{driver.ErrInvalidSpec}, driver.ErrInvalidKey},
			} {
				d, err := store.Decide(ctx, c.key, c.spec, c.n)
				for _, want := range c.is {
					if !errors.Is(err, want) {
						t.Errorf("Decide(key of %d bytes, %d) = %+v, %v; want an error matching %v", len(c.key), c.n, d, err, want)
					}
				}
				if c.isnt != nil && errors.Is(err, c.isnt) {
					t.Errorf("Decide(key of %d bytes, %d) = %v, which should not match %v", len(c.key), c.n, err, c.isnt)
				}
			}
			for _, c := range []struct {
				key  string
				spec *driver.ValidSpec
				is   error
			}{{"", spec, driver.ErrInvalidKey}, {tooLong, spec, driver.ErrInvalidKey}, {"k", nil, driver.ErrInvalidSpec}} {
				if err := store.Reset(ctx, c.key, c.spec); !errors.Is(err, c.is) {
					t.Errorf("Reset(key of %d bytes) = %v; want an error matching %v", len(c.key), err, c.is)
				}
			}
			if m, ok := store.(driver.MultiDecider); ok {
				ok := driver.Request{Key: "k", Spec: spec, N: 1}
				if _, err := m.DecideAll(ctx, []driver.Request{ok, {Key: "", Spec: spec, N: 1}}); !errors.Is(err, driver.ErrInvalidKey) {
					t.Errorf("DecideAll with an empty key: %v; want an error matching %v", err, driver.ErrInvalidKey)
				}
				many := make([]driver.Request, driver.MaxRequests+1)
				for i := range many {
					many[i] = ok
				}
				if _, err := m.DecideAll(ctx, many); !errors.Is(err, driver.ErrTooManyRequests) {
					t.Errorf("DecideAll of %d requests: %v; want an error matching %v", len(many), err, driver.ErrTooManyRequests)
				}
			}
			// Nothing was taken.
			if res, err := lim.Peek(ctx, "k"); err != nil || res.Remaining != float64(spec.MaxCost()) {
				t.Errorf("Peek after the errors = %+v, %v; want %d left", res, err, spec.MaxCost())
			}
		})
	}
}
