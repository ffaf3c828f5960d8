package ratekeeper_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// TestStepUnitsMatchesStep runs every algorithm through the same requests
// with Step and with StepUnits: the same Results, once built, and the same
// states.
func TestStepUnitsMatchesStep(t *testing.T) {
	policies := []ratekeeper.Policy{
		ratekeeper.TokenBucket{Capacity: 5, RefillRate: 0.5, RefillInterval: 300 * time.Millisecond},
		ratekeeper.GCRA{Rate: 4, Period: time.Second, Burst: 3},
		ratekeeper.FixedWindow{Limit: 5, Window: time.Second},
		ratekeeper.SlidingWindowLog{Limit: 5, Window: time.Second},
		ratekeeper.SlidingWindowCounter{Limit: 5, Window: time.Second},
		ratekeeper.LeakyBucket{Capacity: 5, LeakRate: 3.5},
	}
	for _, p := range policies {
		spec, err := p.Spec()
		if err != nil {
			t.Fatal(err)
		}
		t.Run(spec.Algorithm, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			var viaStep, viaUnits ratekeeper.State
			now := int64(1_900_000_000_000_000)
			allowed, denied := 0, 0
			for i := range 2000 {
				now += r.Int64N(400_000)
				n := r.Int64N(spec.MaxCost + 1)
				want := spec.Step(&viaStep, now, n)
				got := spec.Result(spec.StepUnits(&viaUnits, now, n))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("request %d (cost %d): StepUnits gave %+v, Step %+v", i, n, got, want)
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

func TestStepUnitsPanicsOnAll(t *testing.T) {
	spec, err := ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute}),
	).Spec()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("StepUnits on an All Spec did not panic")
		}
	}()
	var st ratekeeper.State
	spec.StepUnits(&st, 1_900_000_000_000_000, 1)
}
