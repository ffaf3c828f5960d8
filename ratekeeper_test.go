package ratekeeper_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func TestTokenBucketValidation(t *testing.T) {
	valid := []ratekeeper.TokenBucket{
		{Capacity: 1, RefillRate: 1, RefillInterval: time.Microsecond},
		{Capacity: 10, RefillRate: 0.1, RefillInterval: time.Second},
		{Capacity: 10, RefillRate: 0.000001, RefillInterval: time.Second},
		{Capacity: 5, RefillRate: 100, RefillInterval: time.Millisecond}, // rate above capacity
		{Capacity: ratekeeper.MaxLimit, RefillRate: ratekeeper.MaxLimit, RefillInterval: time.Hour},
	}
	for _, p := range valid {
		if _, err := ratekeeper.New(memstore.New(), p); err != nil {
			t.Errorf("New(%+v): %v", p, err)
		}
	}
	invalid := []ratekeeper.TokenBucket{
		{Capacity: 0, RefillRate: 1, RefillInterval: time.Second},
		{Capacity: -1, RefillRate: 1, RefillInterval: time.Second},
		{Capacity: ratekeeper.MaxLimit + 1, RefillRate: 1, RefillInterval: time.Second},
		{Capacity: 10, RefillRate: 0, RefillInterval: time.Second},
		{Capacity: 10, RefillRate: -1, RefillInterval: time.Second},
		{Capacity: 10, RefillRate: math.NaN(), RefillInterval: time.Second},
		{Capacity: 10, RefillRate: math.Inf(1), RefillInterval: time.Second},
		{Capacity: 10, RefillRate: math.Inf(-1), RefillInterval: time.Second},
		{Capacity: 10, RefillRate: 1e-7, RefillInterval: time.Second}, // below the resolution
		{Capacity: 10, RefillRate: 2e9, RefillInterval: time.Second},
		{Capacity: 10, RefillRate: 1, RefillInterval: 0},
		{Capacity: 10, RefillRate: 1, RefillInterval: -time.Second},
		{Capacity: 10, RefillRate: 1, RefillInterval: 1500 * time.Nanosecond},
		{Capacity: 10, RefillRate: 1, RefillInterval: 11 * 365 * 24 * time.Hour},
		// Refilling from empty would take longer than MaxPeriod.
		{Capacity: 1000, RefillRate: 0.001, RefillInterval: time.Hour},
	}
	for _, p := range invalid {
		_, err := ratekeeper.New(memstore.New(), p)
		if !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("New(%+v) = %v, want ErrInvalidPolicy", p, err)
		}
	}
	if _, err := ratekeeper.New(memstore.New(), nil); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
		t.Errorf("New(nil policy) = %v, want ErrInvalidPolicy", err)
	}
	if _, err := ratekeeper.New(nil, valid[0]); err == nil {
		t.Error("New(nil store) succeeded")
	}
}

func TestSpecValidateRejectsInconsistentSpecs(t *testing.T) {
	good, err := ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*driver.Spec){
		"unknown algorithm": func(s *driver.Spec) { s.Algorithm = "nope" },
		"zero interval":     func(s *driver.Spec) { s.Params.Interval = 0 },
		"zero rate":         func(s *driver.Spec) { s.Params.Rate = 0 },
		"capacity":          func(s *driver.Spec) { s.Params.Capacity = 7 },
		"max cost":          func(s *driver.Spec) { s.MaxCost = 11 },
		"window":            func(s *driver.Spec) { s.Window = time.Hour },
	} {
		s := good
		mutate(&s)
		if _, err := driver.Validate(s); err == nil {
			t.Errorf("%s: Validate() succeeded", name)
		}
		if _, err := ratekeeper.New(memstore.New(), specPolicy(s)); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("%s: New = %v, want ErrInvalidPolicy", name, err)
		}
	}
	if good.Window != 10*time.Second {
		t.Errorf("Window = %v, want 10s (ten refills of one token)", good.Window)
	}
}

// specPolicy is a Policy defined outside the package.
type specPolicy driver.Spec

func (p specPolicy) Spec() (driver.Spec, error) { return driver.Spec(p), nil }

func TestBadInput(t *testing.T) {
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, key := range []string{"", strings.Repeat("k", ratekeeper.MaxKeyLen+1)} {
		if _, err := lim.Allow(ctx, key); !errors.Is(err, ratekeeper.ErrInvalidKey) {
			t.Errorf("Allow(key of %d bytes) = %v, want ErrInvalidKey", len(key), err)
		}
		if err := lim.Reset(ctx, key); !errors.Is(err, ratekeeper.ErrInvalidKey) {
			t.Errorf("Reset(key of %d bytes) = %v, want ErrInvalidKey", len(key), err)
		}
		if err := lim.Wait(ctx, key); !errors.Is(err, ratekeeper.ErrInvalidKey) {
			t.Errorf("Wait(key of %d bytes) = %v, want ErrInvalidKey", len(key), err)
		}
	}
	if _, err := lim.Allow(ctx, strings.Repeat("k", ratekeeper.MaxKeyLen)); err != nil {
		t.Errorf("Allow(key of MaxKeyLen bytes): %v", err)
	}
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.AllowN(ctx, "k", -1); !errors.Is(err, ratekeeper.ErrInvalidCost) || errors.Is(err, ratekeeper.ErrCostTooHigh) {
		t.Errorf("AllowN(-1) = %v, want ErrInvalidCost only", err)
	}
	_, err = lim.AllowN(ctx, "k", 11)
	if !errors.Is(err, ratekeeper.ErrInvalidCost) || !errors.Is(err, ratekeeper.ErrCostTooHigh) {
		t.Errorf("AllowN(11) over Capacity 10 = %v, want ErrCostTooHigh and ErrInvalidCost", err)
	}
	if err := lim.WaitN(ctx, "k", 11); !errors.Is(err, ratekeeper.ErrCostTooHigh) {
		t.Errorf("WaitN(11) = %v, want ErrCostTooHigh at once", err)
	}
	// Nothing was consumed by the rejected calls.
	if res, _ := lim.Peek(ctx, "k"); res.Remaining != 9 {
		t.Errorf("Remaining = %v after one allowed request, want 9", res.Remaining)
	}
}

func TestWait(t *testing.T) {
	const interval = 50 * time.Millisecond
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The refill phase starts at the first request, no earlier than start.
	start := time.Now()
	if err := lim.Wait(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if err := lim.Wait(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < interval-time.Millisecond {
		t.Errorf("two Waits returned after %v, before the refill at %v", waited, interval)
	}
	if err := lim.WaitN(ctx, "w", 0); err != nil {
		t.Errorf("WaitN(0) = %v", err)
	}
}

func TestWaitOutlastingDeadlineFailsAtOnce(t *testing.T) {
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lim.Wait(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = lim.Wait(ctx, "d")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Wait took %v to see that an hour outlasts a 5 s deadline", elapsed)
	}
}

func TestWaitCancelled(t *testing.T) {
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := lim.Wait(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := lim.Wait(ctx, "c"); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait = %v, want context.Canceled", err)
	}
}

func TestWithName(t *testing.T) {
	p := ratekeeper.TokenBucket{Capacity: 1, RefillRate: 1, RefillInterval: time.Second}
	lim, _ := ratekeeper.New(memstore.New(), p)
	if lim.Name() != driver.AlgorithmTokenBucket {
		t.Errorf("default Name() = %q", lim.Name())
	}
	lim, _ = ratekeeper.New(memstore.New(), p, ratekeeper.WithName("burst"))
	if lim.Name() != "burst" || lim.Policy() != ratekeeper.Policy(p) {
		t.Errorf("Name() = %q, Policy() = %v", lim.Name(), lim.Policy())
	}
}
