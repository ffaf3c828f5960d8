// Package results builds ratekeeper Results from the driver's Outcomes,
// the same way in every store.
package results

import (
	"context"
	"errors"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// Of is the Result of a decision o under spec, a spec other than an All.
func Of(spec *driver.ValidSpec, o driver.Outcome) ratekeeper.Result {
	return ratekeeper.Result{
		Policy:     spec.Name(),
		Allowed:    o.Allowed,
		Limit:      spec.Limit(),
		Remaining:  float64(o.Remaining) / driver.Unit,
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond,
	}
}

// Join is the Result of an All spec from its parts' Outcomes, in the
// order of its parts: the binding part's (see driver.Binding), with the
// latest ResetAfter, and every part's Result as Parts.
func Join(spec *driver.ValidSpec, parts []driver.Outcome) ratekeeper.Result {
	b, _, resetAfter := driver.Binding(parts)
	all := make([]ratekeeper.Result, len(parts))
	for i, o := range parts {
		all[i] = Of(spec.Part(i), o)
	}
	res := all[b]
	res.ResetAfter = time.Duration(resetAfter) * time.Microsecond
	res.Parts = all
	return res
}

// Step runs spec's model against st, as driver.ValidSpec.Step, and
// returns the Result.
func Step(spec *driver.ValidSpec, st *driver.State, now, n int64) ratekeeper.Result {
	var out [driver.MaxParts]driver.Outcome
	spec.Step(st, now, n, out[:])
	if spec.IsAll() {
		return Join(spec, out[:spec.NumParts()])
	}
	return Of(spec, out[0])
}

// SpecOf validates p as ratekeeper.New does, with opts, and returns the
// ValidSpec a store would be given: for tests and tools that run the
// models directly.
func SpecOf(p ratekeeper.Policy, opts ...ratekeeper.Option) (*driver.ValidSpec, error) {
	lim, err := ratekeeper.New(noStore{}, p, opts...)
	if err != nil {
		return nil, err
	}
	return lim.Spec(), nil
}

// noStore is the store of SpecOf's Limiter, which decides nothing.
type noStore struct{}

func (noStore) Decide(context.Context, string, *driver.ValidSpec, int64) (ratekeeper.Result, error) {
	return ratekeeper.Result{}, errors.New("results: SpecOf's limiter decides nothing")
}

func (noStore) Reset(context.Context, string, *driver.ValidSpec) error { return nil }
