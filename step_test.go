package ratekeeper_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/results"
)

// TestStepOneMatchesStep runs every algorithm through the same requests
// with Step and with StepOne: the same Results, once built, and the same
// states.
func TestStepOneMatchesStep(t *testing.T) {
	policies := []ratekeeper.Policy{
		ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.5, RefillInterval: 300 * time.Millisecond},
		ratekeeper.GCRA{Rate: 4, Period: time.Second, Burst: 3},
		ratekeeper.FixedWindow{Limit: 5, Window: time.Second},
		ratekeeper.FixedWindow{Limit: 5, Window: time.Second, Aligned: true},
		ratekeeper.SlidingWindowLog{Limit: 5, Window: time.Second},
		ratekeeper.SlidingWindowCounter{Limit: 5, Window: time.Second},
		ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 3.5},
	}
	for _, p := range policies {
		spec, err := results.SpecOf(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(spec.Algorithm(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var viaStep, viaUnits driver.State
			now := int64(1_900_000_000_000_000)
			allowed, denied := 0, 0
			for i := range 2000 {
				now += r.Int64N(400_000)
				n := r.Int64N(spec.MaxCost() + 1)
				want := results.Step(spec, &viaStep, now, n)
				got := results.Of(spec, spec.StepOne(&viaUnits, now, n))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("request %d (cost %d): StepOne gave %+v, Step %+v", i, n, got, want)
				}
				if !reflect.DeepEqual(viaUnits, viaStep) {
					t.Fatalf("request %d (cost %d): the states differ", i, n)
				}
				if want.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			if allowed == 0 || denied == 0 {
				t.Fatalf("%d allowed and %d denied: the requests test only one branch", allowed, denied)
			}
		})
	}
}

func TestStepOneOnAllDecidesNothing(t *testing.T) {
	spec, err := results.SpecOf(ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute}),
	))
	if err != nil {
		t.Fatal(err)
	}
	var st driver.State
	if o := spec.StepOne(&st, 1_900_000_000_000_000, 1); o.Allowed || !reflect.DeepEqual(st, driver.State{}) {
		t.Errorf("StepOne on an All = %+v, state %+v; want nothing allowed nor taken", o, st)
	}
}
