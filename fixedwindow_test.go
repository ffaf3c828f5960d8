package ratekeeper_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// TestFixedWindowAlignedSpec checks how a FixedWindow's alignment is
// encoded: Params.Rate 1, 0 without it (the Spec of before), a StateID and
// a Short of its own, and no other Rate accepted, by a fixed window alone.
func TestFixedWindowAlignedSpec(t *testing.T) {
	plain, err := ratekeeper.FixedWindow{Limit: 5, Window: time.Minute}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	want := driver.Spec{Algorithm: driver.AlgorithmFixedWindow, Limit: 5, MaxCost: 5, Window: time.Minute,
		Params: driver.Params{Capacity: 5, Interval: 60_000_000}}
	if plain.Algorithm != want.Algorithm || plain.Params != want.Params || plain.Window != want.Window {
		t.Fatalf("unaligned Spec = %+v, want %+v", plain, want)
	}
	aligned, err := ratekeeper.FixedWindow{Limit: 5, Window: time.Minute, Aligned: true}.Spec()
	if err != nil {
		t.Fatal(err)
	}
	want.Params.Rate = 1
	if aligned.Params != want.Params {
		t.Fatalf("aligned Params = %+v, want %+v", aligned.Params, want.Params)
	}
	ps, _ := testutil.SpecOf(ratekeeper.FixedWindow{Limit: 5, Window: time.Minute})
	as, _ := testutil.SpecOf(ratekeeper.FixedWindow{Limit: 5, Window: time.Minute, Aligned: true})
	if ps.StateID().String() != "fw" || as.StateID().String() != "fwa" || ps.StateID() == as.StateID() || ps.Key() == as.Key() {
		t.Fatalf("StateIDs %q and %q, equal %v: want fw and fwa, apart",
			ps.StateID(), as.StateID(), ps.StateID() == as.StateID())
	}

	bad := aligned
	bad.Params.Rate = 2
	if _, err := driver.Validate(bad); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
		t.Errorf("a fixed window with Rate 2: Validate = %v, want an invalid policy", err)
	}
	swc, _ := ratekeeper.SlidingWindowCounter{Limit: 5, Window: time.Minute}.Spec()
	swc.Params.Rate = 1
	if _, err := driver.Validate(swc); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
		t.Errorf("a sliding window counter with Rate 1: Validate = %v, want an invalid policy", err)
	}
}
