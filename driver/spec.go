package driver

import (
	"time"
	"unique"
)

// A ValidSpec is a Spec that passed Validate, with its Window filled in.
// It cannot change: a Limiter makes one, and every Store it calls may
// trust it without validating it again. The zero ValidSpec is not valid;
// only Validate makes one.
//
// A spec has three identities: its Name is what Results, headers and
// metrics call it; its StateID is whose state of a key it keeps (and, as a
// string, how stores name that state in their keys); its Key tells equal
// specs apart from specs that only share a state, for stores that cache
// by spec.
type ValidSpec struct {
	spec  Spec
	alg   *Algorithm  // nil for an All
	parts []ValidSpec // an All's
	id    StateID
}

// Validate checks that s is a Spec that the models and the scripts can run
// exactly, and returns it as a ValidSpec. It fills in a zero Window.
// Errors are *SpecError, or an error of the algorithm's Check.
func Validate(s Spec) (*ValidSpec, error) {
	v := new(ValidSpec)
	if err := v.init(s); err != nil {
		return nil, err
	}
	return v, nil
}

func (v *ValidSpec) init(s Spec) error {
	if s.Name != "" {
		if why := CheckName(s.Name); why != "" {
			return specError(&s, "Name", "%s", why)
		}
	}
	if s.Algorithm == AlgorithmAll {
		return v.initAll(s)
	}
	if s.Parts != nil {
		return specError(&s, "Parts", "are only an All spec's")
	}
	alg := lookup(s.Algorithm)
	if alg == nil {
		return &SpecError{Algorithm: s.Algorithm, Field: "Algorithm", Reason: "is unknown"}
	}
	window, err := alg.Check(&s)
	if err != nil {
		return err
	}
	if s.Limit <= 0 || s.Limit > MaxLimit {
		return specError(&s, "Limit", "must be between 1 and %d, got %d", MaxLimit, s.Limit)
	}
	if s.MaxCost != s.Limit {
		return specError(&s, "MaxCost", "%d differs from its Limit %d", s.MaxCost, s.Limit)
	}
	if window <= 0 || window > maxPeriodMicros {
		return specError(&s, "Window", "of %v is out of range (longest %v)", time.Duration(window)*time.Microsecond, MaxPeriod)
	}
	w := time.Duration(window) * time.Microsecond
	if s.Window != 0 && s.Window != w {
		return specError(&s, "Window", "%v does not match its parameters (%v)", s.Window, w)
	}
	s.Window = w
	short := alg.Short
	if alg.Variant != nil {
		short += alg.Variant(s.Params)
	}
	// The state's name: the spec's Name, unless that is its algorithm's
	// own.
	if s.Name != s.Algorithm {
		short += ":" + s.Name
	}
	*v = ValidSpec{spec: s, alg: alg}
	v.id = StateID{unique.Make(stateName{s.Algorithm, short})}
	return nil
}

// initAll checks an All Spec: 1 to MaxParts valid parts, none an All,
// with distinct names, and the smallest of their MaxCosts as its own.
func (v *ValidSpec) initAll(s Spec) error {
	if len(s.Parts) == 0 || len(s.Parts) > MaxParts {
		return specError(&s, "Parts", "must be 1 to %d policies, not %d", MaxParts, len(s.Parts))
	}
	if s.Limit != 0 || s.Window != 0 || s.Params != (Params{}) {
		return specError(&s, "", "an All spec has no Limit, Window or Params of its own")
	}
	parts := make([]ValidSpec, len(s.Parts))
	maxCost := int64(-1)
	for i, p := range s.Parts {
		if p.Algorithm == AlgorithmAll {
			return specError(&s, "Parts", "hold %q, itself an All", p.Name)
		}
		if p.Name == "" {
			return specError(&s, "Parts", "hold policy %d without a name", i)
		}
		if err := parts[i].init(p); err != nil {
			return err
		}
		for _, q := range s.Parts[:i] {
			if q.Name == p.Name {
				return specError(&s, "Parts", "hold two policies named %q; name them apart with ratekeeper.Named", p.Name)
			}
		}
		if maxCost < 0 || p.MaxCost < maxCost {
			maxCost = p.MaxCost
		}
	}
	if s.MaxCost != maxCost {
		return specError(&s, "MaxCost", "%d is not the smallest of its policies' (%d)", s.MaxCost, maxCost)
	}
	s.Parts = nil // kept as parts, validated
	*v = ValidSpec{spec: s, parts: parts}
	return nil
}

// Algorithm returns the name of the spec's algorithm.
func (v *ValidSpec) Algorithm() string { return v.spec.Algorithm }

// Name returns the policy's name, for Results, headers and metrics.
func (v *ValidSpec) Name() string { return v.spec.Name }

// Limit returns the Result.Limit: capacity, or requests per window. An
// All has none.
func (v *ValidSpec) Limit() int64 { return v.spec.Limit }

// Window returns the time over which Limit is granted. An All has none.
func (v *ValidSpec) Window() time.Duration { return v.spec.Window }

// MaxCost returns the largest cost a single request may have.
func (v *ValidSpec) MaxCost() int64 { return v.spec.MaxCost }

// Params returns the algorithm's parameters.
func (v *ValidSpec) Params() Params { return v.spec.Params }

// IsAll reports whether the spec combines others (see Parts).
func (v *ValidSpec) IsAll() bool { return v.spec.Algorithm == AlgorithmAll }

// NumParts returns the number of policies an All combines: 0 for any
// other spec.
func (v *ValidSpec) NumParts() int { return len(v.parts) }

// Part returns the i-th policy an All combines, 0 <= i < NumParts.
func (v *ValidSpec) Part(i int) *ValidSpec { return &v.parts[i] }

// Spec returns the Spec that v was made from, with its Window filled in.
func (v *ValidSpec) Spec() Spec {
	s := v.spec
	for _, p := range v.parts {
		s.Parts = append(s.Parts, p.Spec())
	}
	return s
}

// SpecKey is a comparable identity of a ValidSpec, for stores that cache
// by spec: equal specs have equal SpecKeys, except that All specs are
// equal only if they are the same ValidSpec, as a Limiter's are.
type SpecKey struct {
	algorithm, name string
	limit, maxCost  int64
	window          time.Duration
	params          Params
	all             *ValidSpec
}

// Key returns the spec's SpecKey.
func (v *ValidSpec) Key() SpecKey {
	k := SpecKey{v.spec.Algorithm, v.spec.Name, v.spec.Limit, v.spec.MaxCost, v.spec.Window, v.spec.Params, nil}
	if len(v.parts) > 0 {
		k.all = v
	}
	return k
}

// Valid reports whether v was made by Validate: a store given the zero
// ValidSpec, or nil, reports an error rather than run it.
func (v *ValidSpec) Valid() bool { return v != nil && (v.alg != nil || len(v.parts) > 0) }

// A StateID identifies the state a key keeps under a spec other than an
// All: specs of equal StateIDs share a key's state, whatever their limits,
// so that a limit can change without resetting anyone. It is made of the
// algorithm, its variant (see Algorithm.Variant) and the spec's Name,
// unless that is its algorithm's own. Comparing two compares two
// pointers; the zero StateID is no spec's.
type StateID struct{ h unique.Handle[stateName] }

type stateName struct{ algorithm, key string }

// String returns the StateID as stores put it in their keys: the
// algorithm's Short with its variant, then ":" and the spec's Name unless
// that is its algorithm's own, as "tb" or "gcra:per-second"; "" for the
// zero StateID.
func (id StateID) String() string {
	if id == (StateID{}) {
		return ""
	}
	return id.h.Value().key
}

// StateID returns the spec's StateID.
func (v *ValidSpec) StateID() StateID { return v.id }

// Policies returns the specs that keep a key's state: an All's parts, or
// v alone.
func (v *ValidSpec) Policies() []*ValidSpec {
	if !v.IsAll() {
		return []*ValidSpec{v}
	}
	ps := make([]*ValidSpec, len(v.parts))
	for i := range v.parts {
		ps[i] = &v.parts[i]
	}
	return ps
}
