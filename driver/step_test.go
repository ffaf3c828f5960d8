package driver_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

const now = int64(1_900_000_000_000_000)

// states returns fresh states for spec's policies.
func states(spec *driver.ValidSpec) []*driver.State {
	sts := make([]*driver.State, max(spec.NumParts(), 1))
	for i := range sts {
		sts[i] = new(driver.State)
	}
	return sts
}

// TestStepOnAllDecidesNothing: Step runs one policy's model, and an All
// has none of its own; its parts decide through Decide.
func TestStepOnAllDecidesNothing(t *testing.T) {
	spec := specOf(t, ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute})))
	var st driver.State
	if o := spec.Step(&st, now, 1, driver.Take); o.Allowed || !reflect.DeepEqual(st, driver.State{}) {
		t.Errorf("Step on an All = %+v, state %+v; want nothing allowed nor taken", o, st)
	}
}

// TestDecideOnePolicyIsStep: for a spec other than an All, Decide is Step.
func TestDecideOnePolicyIsStep(t *testing.T) {
	spec := specOf(t, ratekeeper.TokenBucket{Capacity: 3, RefillRate: 0.5, RefillInterval: time.Second})
	viaDecide, viaStep := states(spec), new(driver.State)
	for i, n := range []int64{1, 2, 0, 1, 3, 0} {
		at := now + int64(i)*300_000
		d := spec.Decide(viaDecide, at, n, driver.Take)
		o := spec.Step(viaStep, at, n, driver.Take)
		if d.Outcome != o || d.Parts != nil || !reflect.DeepEqual(*viaDecide[0], *viaStep) {
			t.Fatalf("request %d: Decide = %+v, Step = %+v", i, d, o)
		}
	}
}

// TestDecideAllOrNothing: an All takes from every part or from none, and
// Check takes from none.
func TestDecideAllOrNothing(t *testing.T) {
	spec := specOf(t, ratekeeper.All(
		ratekeeper.Named("small", ratekeeper.FixedWindow{Limit: 2, Window: time.Minute}),
		ratekeeper.Named("large", ratekeeper.FixedWindow{Limit: 5, Window: time.Minute})))
	sts := states(spec)
	remaining := func() [2]int64 {
		d := spec.Decide(sts, now, 0, driver.Take) // a peek: a Check
		return [2]int64{d.Parts[0].Remaining / driver.Unit, d.Parts[1].Remaining / driver.Unit}
	}
	if d := spec.Decide(sts, now, 2, driver.Check); !d.Allowed || remaining() != [2]int64{2, 5} {
		t.Fatalf("Check = %+v, then %v left; want allowed, nothing taken", d, remaining())
	}
	if d := spec.Decide(sts, now, 2, driver.Take); !d.Allowed || d.Binding != 0 || remaining() != [2]int64{0, 3} {
		t.Fatalf("Take 2 = %+v, then %v left; want allowed, 2 taken from both", d, remaining())
	}
	d := spec.Decide(sts, now, 1, driver.Take)
	if d.Allowed || d.Binding != 0 || !d.Parts[1].Allowed || remaining() != [2]int64{0, 3} {
		t.Fatalf("Take 1 = %+v, then %v left; want denied by small, nothing taken from large", d, remaining())
	}
}
