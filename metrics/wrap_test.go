package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/metrics"
)

// plainStore hides every optional interface of the store it holds.
type plainStore struct{ ratekeeper.Store }

// chargerStore adds Charge and Refund to a store, in terms of Decide:
// enough to see the calls pass through a wrapper.
type chargerStore struct {
	ratekeeper.Store
	charges, refunds int
}

func (s *chargerStore) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.charges++
	return s.Decide(ctx, key, spec, n)
}

func (s *chargerStore) Refund(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	s.refunds++
	return s.Decide(ctx, key, spec, 0)
}

// multiStore decides several keys at once, and takes no charges.
type multiStore struct {
	plainStore
	driver.MultiDecider
}

// multiChargerStore has both optional interfaces.
type multiChargerStore struct {
	*chargerStore
	driver.MultiDecider
}

// TestWrapKeepsOptionalInterfaces: the store Wrap returns implements
// MultiDecider and Charger exactly when the wrapped store does, and its
// calls of them reach the store and are recorded.
func TestWrapKeepsOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	p := ratekeeper.FixedWindow{Limit: 3, Window: time.Hour}
	for _, tc := range []struct {
		name           string
		store          func() (ratekeeper.Store, *chargerStore)
		multi, charger bool
	}{
		{"plain", func() (ratekeeper.Store, *chargerStore) { return plainStore{newMemstore(t)}, nil }, false, false},
		{"multi", func() (ratekeeper.Store, *chargerStore) {
			mem := newMemstore(t) // a Charger too: hide it
			return multiStore{plainStore{mem}, mem}, nil
		}, true, false},
		{"charger", func() (ratekeeper.Store, *chargerStore) {
			c := &chargerStore{Store: plainStore{newMemstore(t)}}
			return c, c
		}, false, true},
		{"both", func() (ratekeeper.Store, *chargerStore) {
			mem := newMemstore(t)
			c := &chargerStore{Store: mem}
			return multiChargerStore{c, mem}, c
		}, true, true},
	} {
		// Wrapped once, and twice (by another Metrics), which records in
		// m too: the outer wrapper sees the inner's interfaces.
		for _, twice := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/twice=%t", tc.name, twice), func(t *testing.T) {
				inner, c := tc.store()
				if twice {
					inner = metrics.New().Wrap(inner)
				}
				m := metrics.New()
				w := m.Wrap(inner)
				md, multi := w.(driver.MultiDecider)
				ch, charger := w.(driver.Charger)
				if multi != tc.multi || charger != tc.charger {
					t.Fatalf("%T: MultiDecider %t, Charger %t; want %t, %t", w, multi, charger, tc.multi, tc.charger)
				}
				spec := newLimiter(t, w, p, ratekeeper.WithName("api")).Spec()
				if multi {
					ds, err := md.DecideAll(ctx, []driver.Request{{Key: "a", Spec: spec, N: 1}, {Key: "b", Spec: spec, N: 3}})
					if err != nil || len(ds) != 2 || !ds[0].Allowed || !ds[1].Allowed {
						t.Fatalf("DecideAll = %+v, %v", ds, err)
					}
				}
				if charger {
					if _, err := ch.Charge(ctx, "a", spec, 1); err != nil {
						t.Fatal(err)
					}
					if _, err := ch.Refund(ctx, "a", spec, 1); err != nil {
						t.Fatal(err)
					}
				}
				if c != nil && (c.charges != 1 || c.refunds != 1) {
					t.Errorf("%d charges and %d refunds reached the store, want 1 of each", c.charges, c.refunds)
				}
				got := series(t, m)
				want := map[string]float64{}
				if tc.multi {
					// One call of two requests, both allowed.
					want["ratekeeper_decisions_total{limiter=api,outcome=allowed,policy=api}"] = 2
					want["ratekeeper_store_duration_seconds_count{limiter=api,op=decide}"] = 1
				}
				if tc.charger {
					want["ratekeeper_store_duration_seconds_count{limiter=api,op=charge}"] = 1
					want["ratekeeper_store_duration_seconds_count{limiter=api,op=refund}"] = 1
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s = %v, want %v", k, got[k], v)
					}
				}
			})
		}
	}
}

// TestWrapTakesLeases: a wrapped memstore takes leases, so a Limiter with
// leases runs on it, and its lease steps are counted.
func TestWrapTakesLeases(t *testing.T) {
	m := metrics.New()
	store := memstore.New()
	defer store.Close()
	wrapped := m.Wrap(store)
	if _, ok := wrapped.(driver.Leaser); !ok {
		t.Fatal("a wrapped memstore is no driver.Leaser")
	}
	lim, err := ratekeeper.New(wrapped, ratekeeper.FixedWindow{Limit: 100, Window: time.Hour},
		ratekeeper.WithLeases(ratekeeper.Leases{TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for range 10 {
		if res, err := lim.Allow(context.Background(), "k"); err != nil || !res.Allowed {
			t.Fatalf("Allow = %+v, %v", res, err)
		}
	}
}
