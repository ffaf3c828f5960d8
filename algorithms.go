package ratekeeper

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// An Algorithm describes one of this package's algorithms to the programs
// that let people choose one, such as a configuration file or a form: its
// name, the fields of its policy with their ranges and defaults, and how
// to make its policy from "n requests per period, with a burst". Each
// algorithm registers its own beside its policy, so that such programs
// loop over Algorithms and never list the algorithms themselves. It is
// the people's side of an algorithm, as driver.Algorithm is the stores'.
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
	PerPeriod func(n int64, period time.Duration, burst int64) Policy

	policy reflect.Type // for Build
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

// Algorithms returns the registered algorithms, sorted by name.
func Algorithms() []Algorithm {
	out := make([]Algorithm, len(registered))
	for i, a := range registered {
		out[i] = a.clone()
	}
	return out
}

// LookupAlgorithm returns the algorithm called name, such as "gcra".
func LookupAlgorithm(name string) (Algorithm, bool) {
	i, ok := slices.BinarySearchFunc(registered, name, func(a Algorithm, name string) int { return strings.Compare(a.Name, name) })
	if !ok {
		return Algorithm{}, false
	}
	return registered[i].clone(), true
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
func (a Algorithm) Build(values []float64) (Policy, error) {
	if len(values) != len(a.Params) {
		return nil, policyError(a.Policy, "", "takes %d values, not %d", len(a.Params), len(values))
	}
	v := reflect.New(a.policy).Elem()
	for i, p := range a.Params {
		x, f := values[i], v.FieldByName(p.Field)
		switch p.Kind {
		case ParamWhole:
			if x != math.Trunc(x) || math.Abs(x) >= 1<<63 {
				return nil, policyError(a.Policy, p.Field, "%v is not a whole number", x)
			}
			f.SetInt(int64(x))
		case ParamDecimal:
			f.SetFloat(x)
		case ParamSeconds:
			ns := math.Round(x * float64(time.Second))
			if math.IsNaN(ns) || math.Abs(ns) >= 1<<63 {
				return nil, boundError(a.Policy, p.Field, BoundMax, MaxPeriod.Seconds(), "%v seconds is longer than %v", x, MaxPeriod)
			}
			f.SetInt(int64(ns))
		}
	}
	return v.Interface().(Policy), nil
}

// registered are the algorithms, sorted by name.
var registered []Algorithm

// register makes an algorithm known, here and to driver, from its init
// function: a, its policy (a zero value, whose type names the Params'
// fields), and the driver's side of it. It fills in Name, Policy, Short
// and the Params' labels. A mistake panics: a program error, made at init
// time.
func register(name string, a Algorithm, policy Policy, d driver.Algorithm) {
	t := reflect.TypeOf(policy)
	a.Name, a.Policy, a.Short = name, t.Name(), d.Short
	if a.Label == "" || a.PerPeriod == nil || len(a.Params) == 0 {
		panic("ratekeeper: register of an incomplete algorithm " + name)
	}
	for i := range a.Params {
		p := &a.Params[i]
		f, ok := t.FieldByName(p.Field)
		if want := paramTypes[p.Kind]; !ok || f.Type != want {
			panic(fmt.Sprintf("ratekeeper: %s has no field %s of type %v", a.Policy, p.Field, want))
		}
		if p.Label == "" {
			p.Label = strings.ToUpper(p.Name[:1]) + strings.ReplaceAll(p.Name[1:], "_", " ")
		}
	}
	a.policy = t
	driver.Register(name, d)
	i, _ := slices.BinarySearchFunc(registered, name, func(a Algorithm, name string) int { return strings.Compare(a.Name, name) })
	registered = slices.Insert(registered, i, a)
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
	return Param{Name: name, Field: field, Doc: doc, Unit: unit, Kind: ParamDecimal, Max: MaxLimit, Default: def, Role: role}
}

// secondsParam is a Param of a time above 0, at most MaxPeriod.
func secondsParam(name, field string, def float64, role Role) Param {
	return Param{Name: name, Field: field, Doc: "seconds", Unit: "s", Kind: ParamSeconds, Max: MaxPeriod.Seconds(), Default: def, Role: role}
}

// The Params that the window algorithms share.
func limitParam(max int64) Param {
	return wholeParam("limit", "Limit", "requests per window", max, 10, RoleRate)
}

var windowParam = secondsParam("window", "Window", 10, RolePeriod)
