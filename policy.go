package ratekeeper

import (
	"fmt"
	"math"
	"time"
)

// A Policy is a rate-limiting algorithm with its parameters, such as a
// TokenBucket. New turns it into a Spec once, validating it.
type Policy interface {
	// Spec validates the policy and returns its integer form. Errors wrap
	// ErrInvalidPolicy.
	Spec() (Spec, error)
}

// Unit is the fixed-point scale of token amounts: a Spec counts tokens in
// millionths, so fractional refills add up exactly (ten refills of 0.1
// token make exactly one token) in Go and in Lua, whose numbers are
// doubles and exact only below 2^53.
const Unit = 1_000_000

// Bounds that keep every intermediate value of every model exact in a
// double (below 2^53), whatever the sequence of requests.
const (
	// MaxLimit is the largest Capacity or Limit a policy may have.
	MaxLimit = 1_000_000_000
	// MaxPeriod is the longest time a policy may take to refill from empty.
	MaxPeriod = 10 * 365 * 24 * time.Hour
)

// Algorithm names, as they appear in Spec.Algorithm.
const (
	AlgorithmTokenBucket = "token_bucket"
)

// Spec is a policy in the integer units its algorithm runs on: times in
// microseconds, token amounts in millionths (Unit). Stores execute Specs;
// memstore runs Step, redisstore runs the Lua script of Spec.Algorithm
// with Params. Every Spec given to a Store has passed Validate.
type Spec struct {
	// Algorithm names the algorithm, such as AlgorithmTokenBucket.
	Algorithm string
	// Limit is the Result.Limit: capacity, or requests per window.
	Limit int64
	// Window is the time over which Limit is granted (for a token bucket,
	// the time to refill from empty), as in the RateLimit-Policy header.
	Window time.Duration
	// MaxCost is the largest cost a single request may have.
	MaxCost int64
	// Params are the algorithm's parameters, in the order its model and
	// script read them.
	Params [4]int64
}

// Validate reports whether the Spec is one that Step and the scripts can
// run exactly. Errors wrap ErrInvalidPolicy.
func (s Spec) Validate() error {
	switch s.Algorithm {
	case AlgorithmTokenBucket:
		return validateTokenBucket(&s)
	}
	return fmt.Errorf("%w: unknown algorithm %q", ErrInvalidPolicy, s.Algorithm)
}

// State is one key's state under a Spec, for stores that keep state in
// process. The zero State is a key never seen (or expired).
type State struct {
	live bool
	v    [3]int64
}

// Step is the Spec's model: it decides a request of cost n at time now (in
// microseconds since the Unix epoch) against st, consumes from st when the
// request is allowed, and returns the Result. n = 0 peeks. It leaves st
// untouched when nothing is consumed. A fresh or expired key has the zero
// State; the key may be forgotten (reset to the zero State) once
// Result.ResetAfter has passed, without changing any later decision.
//
// Step assumes a validated Spec and 0 <= n <= MaxCost; the Lua scripts of
// redisstore are tested to return identical Results.
func (s Spec) Step(st *State, now, n int64) Result {
	switch s.Algorithm {
	case AlgorithmTokenBucket:
		return s.stepTokenBucket(st, now, n)
	}
	panic("ratekeeper: Step on an invalid Spec: " + s.Algorithm)
}

// Result builds a Result from a decision in the Spec's integer units:
// remaining in millionths, retryAfter and resetAfter in microseconds.
// Stores use it so that every store reports the same values.
func (s Spec) Result(allowed bool, remaining, retryAfter, resetAfter int64) Result {
	return Result{
		Allowed:    allowed,
		Limit:      s.Limit,
		Remaining:  float64(remaining) / Unit,
		RetryAfter: time.Duration(retryAfter) * time.Microsecond,
		ResetAfter: time.Duration(resetAfter) * time.Microsecond,
	}
}

// micros converts a duration to whole microseconds, failing on durations
// that are not positive or have a fraction of a microsecond.
func micros(name string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, fmt.Errorf("%w: %s must be positive, got %v", ErrInvalidPolicy, name, d)
	}
	if d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%w: %s %v is not a whole number of microseconds", ErrInvalidPolicy, name, d)
	}
	return int64(d / time.Microsecond), nil
}

// millionths converts a positive token amount to fixed point, rounding to
// the nearest millionth.
func millionths(name string, x float64) (int64, error) {
	if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
		return 0, fmt.Errorf("%w: %s must be a positive finite number, got %v", ErrInvalidPolicy, name, x)
	}
	if x > MaxLimit {
		return 0, fmt.Errorf("%w: %s %v is above the maximum %d", ErrInvalidPolicy, name, x, MaxLimit)
	}
	fp := int64(math.Round(x * Unit))
	if fp == 0 {
		return 0, fmt.Errorf("%w: %s %v is below the resolution of 1e-6", ErrInvalidPolicy, name, x)
	}
	return fp, nil
}

// checkLimit rejects limits outside 1..MaxLimit.
func checkLimit(name string, n int64) error {
	if n <= 0 || n > MaxLimit {
		return fmt.Errorf("%w: %s must be between 1 and %d, got %d", ErrInvalidPolicy, name, MaxLimit, n)
	}
	return nil
}

// ceilDiv returns ⌈a/b⌉ for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
