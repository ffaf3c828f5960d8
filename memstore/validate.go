package memstore

import (
	"slices"
	"time"
	"unique"

	"github.com/ratekeeper/ratekeeper"
)

// policy identifies the state of a key under a Spec: its algorithm, and
// its name unless that is the algorithm's own (so that limiters of one
// policy share it). Slots hold it interned, as a pointer.
type policy struct{ algorithm, name string }

func policyOf(spec *ratekeeper.Spec) unique.Handle[policy] {
	return unique.Make(policy{spec.Algorithm, spec.StateName()})
}

// validSpec is a Spec that passed Validate, with a copy of its Parts, and
// the policies its states are kept under: for an All, one per part.
type validSpec struct {
	spec     ratekeeper.Spec
	policies [ratekeeper.MaxParts]unique.Handle[policy]
}

// is reports whether spec equals v's Spec, Parts included: a Spec is
// validated anew if its Parts changed in place, so that no model ever
// runs on a Spec that failed Validate. It compares the fields in place:
// building a ratekeeper.SpecKey to compare takes several times as long.
func (v *validSpec) is(spec *ratekeeper.Spec) bool {
	if !sameFields(&v.spec, spec) {
		return false
	}
	for i := range spec.Parts {
		if !sameFields(&v.spec.Parts[i], &spec.Parts[i]) {
			return false
		}
	}
	return true
}

// sameFields reports whether a and b are equal but for the contents of
// their Parts.
func sameFields(a, b *ratekeeper.Spec) bool {
	return a.Params == b.Params && a.Limit == b.Limit && a.MaxCost == b.MaxCost &&
		a.Window == b.Window && len(a.Parts) == len(b.Parts) &&
		a.Algorithm == b.Algorithm && a.Name == b.Name
}

// specFields lists the fields of ratekeeper.Spec: the conversion below
// stops compiling when Spec changes, and sameFields must follow.
type specFields struct {
	Algorithm string
	Name      string
	Limit     int64
	Window    time.Duration
	MaxCost   int64
	Params    [4]int64
	Parts     []ratekeeper.Spec
}

var _ = specFields(ratekeeper.Spec{})

// validate checks a Spec before its model runs. It remembers the last few
// Specs it validated, for the Limiters sharing this store.
func (s *Store) validate(spec *ratekeeper.Spec) (*validSpec, error) {
	for i := range s.validated {
		if v := s.validated[i].Load(); v != nil && v.is(spec) {
			return v, nil
		}
	}
	return s.validateNew(spec)
}

// validateNew validates a Spec not seen lately, and remembers it.
func (s *Store) validateNew(spec *ratekeeper.Spec) (*validSpec, error) {
	v := &validSpec{spec: *spec}
	v.spec.Parts = slices.Clone(spec.Parts) // the caller's may change
	if err := v.spec.Validate(); err != nil {
		return nil, err
	}
	if v.spec.Algorithm == ratekeeper.AlgorithmAll {
		for i := range v.spec.Parts {
			v.policies[i] = policyOf(&v.spec.Parts[i])
		}
	} else {
		v.policies[0] = policyOf(&v.spec)
	}
	s.validated[(s.nextValid.Add(1)-1)%uint32(len(s.validated))].Store(v) // the first in the first slot, checked first
	return v, nil
}
