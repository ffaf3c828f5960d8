package ratekeeper

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxParts is the largest number of policies All combines.
const MaxParts = 8

// MaxNameLen is the longest policy name, in bytes.
const MaxNameLen = 64

// All combines policies into one, which admits a request only when every
// one of them does: 10 per second and 1,000 per day, say. Each decision is
// atomic over all of them (one script call in Redis): an allowed request
// takes its cost from every policy, a denied one from none, so a denial by
// one policy costs the others nothing.
//
// The Result describes the binding policy: when denied, the one that
// denies for longest (its RetryAfter is when the request could pass); when
// allowed, the one with the least Remaining. Its ResetAfter is when all of
// them are full again, and Result.Parts holds every policy's own Result.
//
// Each policy has a name, for Results, response headers and metrics: the
// one given with Named, else its algorithm's. Names must differ, so name
// two policies of one algorithm. Nested Alls are flattened; up to MaxParts
// policies.
func All(policies ...Policy) Policy { return all(policies) }

type all []Policy

// Spec validates every policy and returns the combination's Spec.
func (a all) Spec() (Spec, error) {
	s := Spec{Algorithm: AlgorithmAll, Name: AlgorithmAll}
	for i, p := range a {
		if p == nil {
			return Spec{}, fmt.Errorf("%w: All: policy %d is nil", ErrInvalidPolicy, i)
		}
		ps, err := p.Spec()
		if err != nil {
			return Spec{}, err
		}
		if ps.Algorithm != AlgorithmAll {
			if ps.Name == "" {
				ps.Name = ps.Algorithm
			}
			s.Parts = append(s.Parts, ps)
			continue
		}
		s.Parts = append(s.Parts, ps.Parts...)
	}
	if len(s.Parts) > 0 {
		s.MaxCost = s.Parts[0].MaxCost
		for _, p := range s.Parts[1:] {
			s.MaxCost = min(s.MaxCost, p.MaxCost)
		}
	}
	return s, validateAll(&s)
}

// validateAll checks an All Spec: 1 to MaxParts valid parts, none an All,
// with distinct names, and the smallest of their MaxCosts as its own.
func validateAll(s *Spec) error {
	if len(s.Parts) == 0 || len(s.Parts) > MaxParts {
		return fmt.Errorf("%w: All combines 1 to %d policies, not %d", ErrInvalidPolicy, MaxParts, len(s.Parts))
	}
	if s.Limit != 0 || s.Window != 0 || s.Params != ([4]int64{}) {
		return fmt.Errorf("%w: an All spec has no Limit, Window or Params of its own", ErrInvalidPolicy)
	}
	maxCost := int64(-1)
	for i, p := range s.Parts {
		if p.Algorithm == AlgorithmAll {
			return fmt.Errorf("%w: All: policy %q is itself an All", ErrInvalidPolicy, p.Name)
		}
		if p.Name == "" {
			return fmt.Errorf("%w: All: policy %d has no name", ErrInvalidPolicy, i)
		}
		if err := p.Validate(); err != nil {
			return err
		}
		for _, q := range s.Parts[:i] {
			if q.Name == p.Name {
				return fmt.Errorf("%w: All: two policies are named %q; name them apart with ratekeeper.Named",
					ErrInvalidPolicy, p.Name)
			}
		}
		if maxCost < 0 || p.MaxCost < maxCost {
			maxCost = p.MaxCost
		}
	}
	if s.MaxCost != maxCost {
		return fmt.Errorf("%w: All MaxCost %d is not the smallest of its policies' (%d)", ErrInvalidPolicy, s.MaxCost, maxCost)
	}
	return nil
}

// Named gives policy a name, used in Results, response headers and
// metrics instead of its algorithm's: "per-second", "daily". Names are 1
// to MaxNameLen bytes of printable UTF-8.
func Named(name string, policy Policy) Policy { return named{name, policy} }

type named struct {
	name   string
	policy Policy
}

// Spec returns the policy's Spec under the name.
func (n named) Spec() (Spec, error) {
	if n.policy == nil {
		return Spec{}, fmt.Errorf("%w: Named(%q): nil Policy", ErrInvalidPolicy, n.name)
	}
	if err := checkName(n.name, false); err != nil {
		return Spec{}, err
	}
	s, err := n.policy.Spec()
	s.Name = n.name
	return s, err
}

// checkName rejects names that would be awkward in a header, a metric
// label or a Redis key; an empty name is allowed unless required.
func checkName(name string, allowEmpty bool) error {
	if name == "" {
		if allowEmpty {
			return nil
		}
		return fmt.Errorf("%w: empty name", ErrInvalidPolicy)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: name of %d bytes is longer than %d", ErrInvalidPolicy, len(name), MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: name %q is not valid UTF-8", ErrInvalidPolicy, name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: name %q holds an unprintable character", ErrInvalidPolicy, name)
		}
	}
	return nil
}

// StepAll is Step for an All Spec whose parts' states are kept apart, as
// memstore keeps them: sts[i] is the state of s.Parts[i]. It first decides
// every part without consuming; only if all allow does it take n from
// each.
func (s *Spec) StepAll(sts []*State, now, n int64) Result {
	var buf [MaxParts]Result
	parts := buf[:len(s.Parts)]
	allowed := true
	for i := range s.Parts {
		p := &s.Parts[i]
		parts[i] = p.step(sts[i], now, n, false).result(p)
		allowed = allowed && parts[i].Allowed
	}
	if allowed && n > 0 {
		for i := range s.Parts {
			p := &s.Parts[i]
			parts[i] = p.step(sts[i], now, n, true).result(p)
		}
	}
	return s.Join(parts)
}

// Join builds an All Spec's Result from its parts' Results, in the order
// of s.Parts: the binding part's Result (see All), allowed only if every
// part allows, with the latest ResetAfter and a copy of parts as Parts.
// When the request is denied, the parts that would have allowed it report
// their state as it is, since nothing was taken.
func (s Spec) Join(parts []Result) Result {
	allowed := true
	for _, p := range parts {
		allowed = allowed && p.Allowed
	}
	b := 0 // the binding part
	var resetAfter time.Duration
	for i, p := range parts {
		resetAfter = max(resetAfter, p.ResetAfter)
		switch q := parts[b]; {
		case allowed && p.Remaining < q.Remaining,
			!allowed && !p.Allowed && (q.Allowed || p.RetryAfter > q.RetryAfter):
			b = i
		}
	}
	res := parts[b]
	res.ResetAfter = resetAfter
	res.Parts = append([]Result(nil), parts...)
	return res
}

// StateName is the name under which stores keep a key's state for the
// Spec: its Name, or "" when that is its algorithm's own. Limiters whose
// policies share an algorithm and a StateName share the state of a key.
func (s *Spec) StateName() string {
	if s.Name == s.Algorithm {
		return ""
	}
	return s.Name
}

// SpecKey is a comparable identity of a Spec, for stores that cache by
// Spec: equal Specs have equal SpecKeys, except that All Specs are equal
// only if they share their Parts, as the Specs of one Limiter do.
type SpecKey struct {
	algorithm, name string
	limit, maxCost  int64
	window          time.Duration
	params          [4]int64
	parts           *Spec
	nparts          int
}

// Key returns the Spec's SpecKey.
func (s *Spec) Key() SpecKey {
	k := SpecKey{s.Algorithm, s.Name, s.Limit, s.MaxCost, s.Window, s.Params, nil, len(s.Parts)}
	if len(s.Parts) > 0 {
		k.parts = &s.Parts[0]
	}
	return k
}
