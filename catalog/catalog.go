// Package catalog describes ratekeeper's algorithms to the programs that
// let people choose one, such as a configuration file or a form: each
// algorithm's name, the fields of its policy with their ranges and
// defaults, how to build its policy from the values of a form, and how to
// make it from "n requests per period, with a burst". Such programs loop
// over All and never list the algorithms themselves; ratekeeper-server's
// configuration and the demo's form are made so. It is the people's side
// of an algorithm, as driver.Algorithm is the stores'.
package catalog

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// An Algorithm describes one of ratekeeper's algorithms: its name, the
// fields of its policy with their ranges and defaults, and how to make
// its policy from "n requests per period, with a burst".
type Algorithm struct {
	// Name is the algorithm's name, as in driver.Spec.Algorithm:
	// "token_bucket".
	Name string
	// Policy is the name of its policy's type, as PolicyError.Policy
	// has it: "TokenBucket".
	Policy string
	// Short is the short form of Name that stores use in keys: "tb".
	Short string
	// Label names the algorithm for people: "Token bucket".
	Label string
	// Doc says what it does, in a sentence or two.
	Doc string
	// Remaining says what a Result's Remaining counts: "tokens left".
	Remaining string
	// Summary describes a policy in a sentence, with {name} standing for
	// the value of the Param called name: "{limit} per {window} s window."
	Summary string
	// Recovers is the verb for how time brings a used policy back to its
	// capacity, as in "takes more than MaxPeriod to fill": "fill",
	// "drain", "refill".
	Recovers string
	// Params are the fields of its policy that a person sets, in the
	// order a form shows them.
	Params []Param
	// PerPeriod returns the policy that allows n requests per period,
	// with bursts of up to burst if the algorithm Bursts (burst is
	// ignored otherwise). The policy may be invalid: New says why.
	PerPeriod func(n int64, period time.Duration, burst int64) ratekeeper.Policy

	policy ratekeeper.Policy // its zero value, whose type Build fills
}

// A Param is a field of an algorithm's policy, as a person sets it.
type Param struct {
	// Name names it in files and forms, in snake case: "refill_rate".
	Name string
	// Field is the policy's field, as PolicyError.Field names it:
	// "RefillRate".
	Field string
	// Label names it for people: "Refill rate".
	Label string
	// Doc says what it counts: "tokens per interval".
	Doc string
	// Unit follows a value of it in a sentence: "s", "per interval".
	Unit string
	// Kind is how a value of it is written.
	Kind ParamKind
	// Min and Max are its range: a whole number from Min to Max, or
	// another number above Min (0) and at most Max.
	Min, Max float64
	// Default is a value to start from: every algorithm's defaults allow
	// about ten requests at once and one a second after that.
	Default float64
	// Role is the part of "n requests per period, with a burst" that
	// Algorithm.PerPeriod makes it from, if any.
	Role Role
}

// A ParamKind is how a Param's value is written.
type ParamKind string

const (
	// ParamWhole is a whole number, such as a capacity (an int64 field).
	ParamWhole ParamKind = "whole"
	// ParamDecimal is a number that may have a fraction, such as a rate
	// (a float64 field).
	ParamDecimal ParamKind = "decimal"
	// ParamSeconds is a time in seconds, which may have a fraction (a
	// time.Duration field).
	ParamSeconds ParamKind = "seconds"
)

// A Role is a part of "n requests per period, with a burst".
type Role int

const (
	// RoleNone is a Param that PerPeriod does not set from its arguments.
	RoleNone Role = iota
	// RoleRate is made from n: a limit, or a rate.
	RoleRate
	// RolePeriod is made from the period: a window, or an interval.
	RolePeriod
	// RoleBurst is made from the burst: a capacity.
	RoleBurst
)

// All returns the algorithms, sorted by name.
func All() []Algorithm {
	out := make([]Algorithm, len(algorithms))
	for i, a := range algorithms {
		out[i] = a.clone()
	}
	return out
}

// Lookup returns the algorithm called name, such as "gcra".
func Lookup(name string) (Algorithm, bool) {
	i, ok := slices.BinarySearchFunc(algorithms, name, func(a Algorithm, name string) int { return strings.Compare(a.Name, name) })
	if !ok {
		return Algorithm{}, false
	}
	return algorithms[i].clone(), true
}

// Bursts reports whether the algorithm takes a burst: whether one of its
// Params has RoleBurst.
func (a Algorithm) Bursts() bool {
	return slices.ContainsFunc(a.Params, func(p Param) bool { return p.Role == RoleBurst })
}

// Param returns the Param called name.
func (a Algorithm) Param(name string) (Param, bool) {
	i := slices.IndexFunc(a.Params, func(p Param) bool { return p.Name == name })
	if i < 0 {
		return Param{}, false
	}
	return a.Params[i], true
}

// FieldParam returns the Param of the policy's field, as PolicyError.Field
// names it.
func (a Algorithm) FieldParam(field string) (Param, bool) {
	i := slices.IndexFunc(a.Params, func(p Param) bool { return p.Field == field })
	if i < 0 {
		return Param{}, false
	}
	return a.Params[i], true
}

// Build returns the algorithm's policy with the given values of its
// Params, in their order; seconds are rounded to the nanosecond. It
// checks only that each value fits its field; New checks the policy.
func (a Algorithm) Build(values []float64) (ratekeeper.Policy, error) {
	if len(values) != len(a.Params) {
		return nil, &ratekeeper.PolicyError{Policy: a.Policy, Reason: fmt.Sprintf("takes %d values, not %d", len(a.Params), len(values))}
	}
	v := reflect.New(reflect.TypeOf(a.policy)).Elem()
	for i, p := range a.Params {
		x, f := values[i], v.FieldByName(p.Field)
		switch p.Kind {
		case ParamWhole:
			if x != math.Trunc(x) || math.Abs(x) >= 1<<63 {
				return nil, &ratekeeper.PolicyError{Policy: a.Policy, Field: p.Field, Reason: fmt.Sprintf("%v is not a whole number", x)}
			}
			f.SetInt(int64(x))
		case ParamDecimal:
			f.SetFloat(x)
		case ParamSeconds:
			ns := math.Round(x * float64(time.Second))
			if math.IsNaN(ns) || math.Abs(ns) >= 1<<63 {
				return nil, &ratekeeper.PolicyError{Policy: a.Policy, Field: p.Field, Reason: fmt.Sprintf("%v seconds is longer than %v", x, ratekeeper.MaxPeriod),
					Bound: driver.BoundMax, Limit: ratekeeper.MaxPeriod.Seconds()}
			}
			f.SetInt(int64(ns))
		}
	}
	return v.Interface().(ratekeeper.Policy), nil
}

// algorithms are the algorithms, sorted by name (see init).
var algorithms = []Algorithm{
	{
		Name: driver.AlgorithmTokenBucket, Short: "tb", policy: ratekeeper.TokenBucket{},
		Label:     "Token bucket",
		Doc:       "A bucket that holds up to Capacity tokens and gains Refill rate tokens every Refill interval: bursts of up to Capacity, then the refill rate.",
		Remaining: "tokens left",
		Summary:   "Bursts of up to {capacity}, then {refill_rate} every {refill_interval} s.",
		Recovers:  "fill",
		Params: []Param{
			wholeParam("capacity", "Capacity", "tokens", ratekeeper.MaxLimit, 10, RoleBurst),
			decimalParam("refill_rate", "RefillRate", "tokens per interval", "per interval", 1, RoleRate),
			secondsParam("refill_interval", "RefillInterval", 1, RolePeriod),
		},
		PerPeriod: func(n int64, period time.Duration, burst int64) ratekeeper.Policy {
			return ratekeeper.TokenBucket{Capacity: burst, RefillRate: float64(n), RefillInterval: period}
		},
	},
	{
		Name: driver.AlgorithmGCRA, Short: "gcra", policy: ratekeeper.GCRA{},
		Label:     "GCRA",
		Doc:       "A bucket that refills continuously, one request every period / rate: no refill steps, one integer of state.",
		Remaining: "requests left",
		Summary:   "{rate} per {period} s, bursts of up to {burst}.",
		Recovers:  "refill",
		Params: []Param{
			wholeParam("rate", "Rate", "requests per period", ratekeeper.MaxLimit, 1, RoleRate),
			secondsParam("period", "Period", 1, RolePeriod),
			wholeParam("burst", "Burst", "requests at once", ratekeeper.MaxLimit, 10, RoleBurst),
		},
		PerPeriod: func(n int64, period time.Duration, burst int64) ratekeeper.Policy {
			return ratekeeper.GCRA{Rate: n, Period: period, Burst: burst}
		},
	},
	{
		Name: driver.AlgorithmLeakyBucket, Short: "lb", policy: ratekeeper.LeakyBucket{},
		Label:     "Leaky bucket",
		Doc:       "Each request pours one into a bucket of capacity that drains leak rate per second; a request that would overflow it is rejected.",
		Remaining: "free in the bucket",
		Summary:   "Holds {capacity}, drains {leak_rate} per second.",
		Recovers:  "drain",
		Params: []Param{
			wholeParam("capacity", "Capacity", "requests", ratekeeper.MaxLeakyCapacity, 10, RoleBurst),
			decimalParam("leak_rate", "LeakRate", "requests per second", "per second", 1, RoleRate),
		},
		PerPeriod: func(n int64, period time.Duration, burst int64) ratekeeper.Policy {
			return ratekeeper.LeakyBucket{Capacity: burst, LeakRate: float64(n) / period.Seconds()}
		},
	},
	{
		Name: driver.AlgorithmSlidingWindowCounter, Short: "swc", policy: ratekeeper.SlidingWindowCounter{},
		Label:     "Sliding window counter",
		Doc:       "About limit requests in any rolling window, weighing the previous window\u2019s count: the memory of a fixed window, without its boundary bursts.",
		Remaining: "left (estimated)",
		Summary:   "About {limit} in any {window} s.",
		Params:    []Param{limitParam(ratekeeper.MaxLimit), windowParam},
		PerPeriod: func(n int64, period time.Duration, _ int64) ratekeeper.Policy {
			return ratekeeper.SlidingWindowCounter{Limit: n, Window: period}
		},
	},
	{
		Name: driver.AlgorithmSlidingWindowLog, Short: "swl", policy: ratekeeper.SlidingWindowLog{},
		Label:     "Sliding window log",
		Doc:       "Exactly limit requests in any rolling window: remembers the time of every request.",
		Remaining: "left in the window",
		Summary:   "{limit} in any {window} s.",
		Params:    []Param{limitParam(ratekeeper.MaxLogLimit), windowParam},
		PerPeriod: func(n int64, period time.Duration, _ int64) ratekeeper.Policy {
			return ratekeeper.SlidingWindowLog{Limit: n, Window: period}
		},
	},
	{
		Name: driver.AlgorithmFixedWindow, Short: "fw", policy: ratekeeper.FixedWindow{},
		Label:     "Fixed window",
		Doc:       "Limit requests per window, counted from the first request. Up to twice the limit can pass across a window boundary.",
		Remaining: "left in this window",
		Summary:   "{limit} per {window} s window.",
		Params:    []Param{limitParam(ratekeeper.MaxLimit), windowParam},
		PerPeriod: func(n int64, period time.Duration, _ int64) ratekeeper.Policy {
			return ratekeeper.FixedWindow{Limit: n, Window: period}
		},
	},
}

// init completes the algorithms: their policy's type name and the Params'
// labels, and checks them against their policies and the driver. A
// mistake panics: a program error, made at init time.
func init() {
	slices.SortFunc(algorithms, func(a, b Algorithm) int { return strings.Compare(a.Name, b.Name) })
	if names := driver.Algorithms(); len(names) != len(algorithms) {
		panic(fmt.Sprintf("catalog: %d algorithms, the driver has %v", len(algorithms), names))
	}
	for i := range algorithms {
		a := &algorithms[i]
		t := reflect.TypeOf(a.policy)
		a.Policy = t.Name()
		if a.Label == "" || a.PerPeriod == nil || len(a.Params) == 0 {
			panic("catalog: an incomplete algorithm " + a.Name)
		}
		for i := range a.Params {
			p := &a.Params[i]
			f, ok := t.FieldByName(p.Field)
			if want := paramTypes[p.Kind]; !ok || f.Type != want {
				panic(fmt.Sprintf("catalog: %s has no field %s of type %v", a.Policy, p.Field, want))
			}
			if p.Label == "" {
				p.Label = strings.ToUpper(p.Name[:1]) + strings.ReplaceAll(p.Name[1:], "_", " ")
			}
		}
	}
}

// paramTypes are the Go types of the fields of each ParamKind.
var paramTypes = map[ParamKind]reflect.Type{
	ParamWhole:   reflect.TypeFor[int64](),
	ParamDecimal: reflect.TypeFor[float64](),
	ParamSeconds: reflect.TypeFor[time.Duration](),
}

func (a Algorithm) clone() Algorithm {
	a.Params = slices.Clone(a.Params)
	return a
}

// wholeParam is a Param of a whole number from 1 to max.
func wholeParam(name, field, doc string, max int64, def float64, role Role) Param {
	return Param{Name: name, Field: field, Doc: doc, Kind: ParamWhole, Min: 1, Max: float64(max), Default: def, Role: role}
}

// decimalParam is a Param of a number above 0, at most MaxLimit.
func decimalParam(name, field, doc, unit string, def float64, role Role) Param {
	return Param{Name: name, Field: field, Doc: doc, Unit: unit, Kind: ParamDecimal, Max: ratekeeper.MaxLimit, Default: def, Role: role}
}

// secondsParam is a Param of a time above 0, at most MaxPeriod.
func secondsParam(name, field string, def float64, role Role) Param {
	return Param{Name: name, Field: field, Doc: "seconds", Unit: "s", Kind: ParamSeconds, Max: ratekeeper.MaxPeriod.Seconds(), Default: def, Role: role}
}

// The Params that the window algorithms share.
func limitParam(max int64) Param {
	return wholeParam("limit", "Limit", "requests per window", max, 10, RoleRate)
}

var windowParam = secondsParam("window", "Window", 10, RolePeriod)
