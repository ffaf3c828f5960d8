package ratekeeper

import (
	"github.com/ratekeeper/ratekeeper/driver"
)

// All combines policies into one, which admits a request only when every
// one of them does: 10 per second and 1,000 per day, say. Each decision is
// atomic over all of them (one script call in Redis): an allowed request
// takes its cost from every policy, a denied one from none, so a denial by
// one policy costs the others nothing.
//
// The Result describes the binding policy, the one that holds the next
// request back the longest: when denied, the one that denies for longest
// (its RetryAfter is when the request could pass); when allowed, the one
// with the least Remaining; after a Charge or a Refund, the one whose
// RetryAfter for a request of cost 1 is longest, whether or not n fitted
// in it (Allowed reports whether n fitted in every policy). Its
// ResetAfter is when all of them are full again, and Result.Parts holds
// every policy's own Result.
//
// Each policy has a name, for Results, response headers and metrics: the
// one given with Named, else its algorithm's. Names must differ, so name
// two policies of one algorithm. Nested Alls are flattened; up to 8
// policies.
func All(policies ...Policy) Policy { return all(policies) }

type all []Policy

// Spec validates every policy and returns the combination's Spec.
func (a all) Spec() (driver.Spec, error) {
	s := driver.Spec{Algorithm: driver.AlgorithmAll, Name: driver.AlgorithmAll}
	for i, p := range a {
		if p == nil {
			return driver.Spec{}, policyError("All", "", "policy %d is nil", i)
		}
		ps, err := p.Spec()
		if err != nil {
			return driver.Spec{}, err
		}
		if ps.Algorithm != driver.AlgorithmAll {
			if ps.Name == "" {
				ps.Name = ps.Algorithm
			}
			s.Parts = append(s.Parts, ps)
			continue
		}
		s.Parts = append(s.Parts, ps.Parts...)
	}
	if len(s.Parts) == 0 || len(s.Parts) > driver.MaxParts {
		return driver.Spec{}, policyError("All", "", "combines 1 to %d policies, not %d", driver.MaxParts, len(s.Parts))
	}
	s.MaxCost = s.Parts[0].MaxCost
	for i, p := range s.Parts {
		s.MaxCost = min(s.MaxCost, p.MaxCost)
		for _, q := range s.Parts[:i] {
			if q.Name == p.Name {
				return driver.Spec{}, policyError("All", "", "two policies are named %q; name them apart with ratekeeper.Named", p.Name)
			}
		}
	}
	return s, nil
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
func (n named) Spec() (driver.Spec, error) {
	if n.policy == nil {
		return driver.Spec{}, policyError("Named", "", "(%q): nil Policy", n.name)
	}
	if why := driver.CheckName(n.name); why != "" {
		return driver.Spec{}, policyError("Named", "", "name %s", why)
	}
	s, err := n.policy.Spec()
	s.Name = n.name
	return s, err
}
