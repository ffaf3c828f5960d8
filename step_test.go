package ratekeeper_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// TestStepOnAllDecidesNothing: Step runs one policy's model, and an All
// has none of its own; its parts decide through Decide.
func TestStepOnAllDecidesNothing(t *testing.T) {
	spec, err := testutil.SpecOf(ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute}),
	))
	if err != nil {
		t.Fatal(err)
	}
	var st driver.State
	if o := spec.Step(&st, 1_900_000_000_000_000, 1, driver.Take); o.Allowed || !reflect.DeepEqual(st, driver.State{}) {
		t.Errorf("Step on an All = %+v, state %+v; want nothing allowed nor taken", o, st)
	}
}
