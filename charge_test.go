package ratekeeper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// decideOnly is a Store without charges: it only wraps Decide and Reset.
type decideOnly struct{ driver.Store }

// A Limiter over a Store that is not a driver.Charger cannot charge or
// refund, and says so; nothing reaches the store.
func TestChargeNeedsACharger(t *testing.T) {
	lim, err := ratekeeper.New(decideOnly{memstore.New()}, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.Charge(ctx, "k", 1); !errors.Is(err, ratekeeper.ErrNoCharges) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Charge: %v, want ErrNoCharges", err)
	}
	if _, err := lim.Refund(ctx, "k", 1); !errors.Is(err, ratekeeper.ErrNoCharges) {
		t.Errorf("Refund: %v, want ErrNoCharges", err)
	}
}

// Charge and Refund check their input as AllowN does, but for costs up to
// MaxLimit, whatever the policy admits at once.
func TestChargeInput(t *testing.T) {
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		n    int64
		want error
	}{
		{"", 1, ratekeeper.ErrInvalidKey},
		{"k", -1, ratekeeper.ErrInvalidCost},
		{"k", ratekeeper.MaxLimit + 1, ratekeeper.ErrInvalidCost},
		{"k", ratekeeper.MaxLimit, nil},
		{"k", 0, nil},
	} {
		for name, call := range map[string]func(context.Context, string, int64) (ratekeeper.Result, error){
			"Charge": lim.Charge, "Refund": lim.Refund,
		} {
			if _, err := call(ctx, c.key, c.n); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Errorf("%s(%q, %d): %v, want %v", name, c.key, c.n, err, c.want)
			}
		}
	}
}
