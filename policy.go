package ratekeeper

import (
	"fmt"
	"math"
	"math/bits"
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
	AlgorithmTokenBucket          = "token_bucket"
	AlgorithmGCRA                 = "gcra"
	AlgorithmFixedWindow          = "fixed_window"
	AlgorithmSlidingWindowLog     = "sliding_window_log"
	AlgorithmSlidingWindowCounter = "sliding_window_counter"
	AlgorithmLeakyBucket          = "leaky_bucket"
	AlgorithmAll                  = "all"
)

// Spec is a policy in the integer units its algorithm runs on: times in
// microseconds, token amounts in millionths (Unit). Stores execute Specs;
// memstore runs Step, redisstore runs the Lua script of Spec.Algorithm
// with Params. Every Spec given to a Store has passed Validate.
type Spec struct {
	// Algorithm names the algorithm, such as AlgorithmTokenBucket.
	Algorithm string
	// Name names the policy in Results, response headers and metrics (see
	// Named and WithName). New sets it to the Algorithm when it is empty.
	Name string
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
	// Parts are the Specs of the policies that an All Spec combines, each
	// with a distinct Name; nil for every other algorithm. An All Spec has
	// no Limit, Window or Params of its own, and its MaxCost is the
	// smallest of its parts'.
	Parts []Spec
}

// Validate reports whether the Spec is one that Step and the scripts can
// run exactly. Errors wrap ErrInvalidPolicy.
func (s Spec) Validate() error {
	if err := checkName(s.Name, true); err != nil {
		return err
	}
	if s.Parts != nil && s.Algorithm != AlgorithmAll {
		return fmt.Errorf("%w: only an All spec has Parts", ErrInvalidPolicy)
	}
	switch s.Algorithm {
	case AlgorithmTokenBucket:
		return validateTokenBucket(&s)
	case AlgorithmGCRA:
		return validateGCRA(&s)
	case AlgorithmFixedWindow, AlgorithmSlidingWindowLog, AlgorithmSlidingWindowCounter:
		return validateWindow(&s)
	case AlgorithmLeakyBucket:
		return validateLeakyBucket(&s)
	case AlgorithmAll:
		return validateAll(&s)
	}
	return fmt.Errorf("%w: unknown algorithm %q", ErrInvalidPolicy, s.Algorithm)
}

// State is one key's state under a Spec, for stores that keep state in
// process. The zero State is a key never seen (or expired).
type State struct {
	live  bool
	v     [3]int64
	log   *[]logEntry // a sliding window log's entries, oldest first
	parts []State     // an All's, one per part
}

// Step is the Spec's model: it decides a request of cost n at time now (in
// microseconds since the Unix epoch) against st, consumes from st when the
// request is allowed, and returns the Result. n = 0 peeks. When nothing is
// consumed, it changes st only to drop a sliding window log's entries
// that have left, as the script does. A fresh or expired key has the zero
// State; the key may be forgotten (reset to the zero State) once
// Result.ResetAfter has passed, without changing any later decision made
// at that time or after it.
//
// Step assumes a validated Spec and 0 <= n <= MaxCost; the Lua scripts of
// redisstore are tested to return identical Results.
func (s *Spec) Step(st *State, now, n int64) Result {
	if s.Algorithm == AlgorithmAll {
		if len(st.parts) != len(s.Parts) {
			st.parts = make([]State, len(s.Parts))
		}
		var sts [MaxParts]*State
		for i := range st.parts {
			sts[i] = &st.parts[i]
		}
		return s.StepAll(sts[:len(s.Parts)], now, n)
	}
	return s.step(st, now, n, n > 0).result(s)
}

// StepUnits is Step for a Spec other than an All, returning its decision
// in the Spec's integer units, the arguments of Result: a store that holds
// a lock over st can build the Result after releasing it. It panics on an
// All Spec (see StepAll).
func (s *Spec) StepUnits(st *State, now, n int64) (allowed bool, remaining, retryAfter, resetAfter int64) {
	if s.Algorithm == AlgorithmAll {
		panic("ratekeeper: StepUnits on an All Spec")
	}
	o := s.step(st, now, n, n > 0)
	return o.allowed, o.remaining, o.retryAfter, o.resetAfter
}

// step decides a request of cost n against st and, with take, consumes n
// when it is allowed. Without take it consumes nothing, and an allowed
// request reports the state as it is.
//
// A clock that goes back never makes a state's time go back: each model
// decides at now or, while now is behind it, at the latest time its state
// holds (a token bucket's last refill, a window's start, a log's newest
// entry, a leaky bucket's last level), so that a request admitted at a
// clock gone back is never counted as older than one before it, and
// nothing refills until the clock catches up. GCRA needs no such care: a
// clock gone back only puts its theoretical arrival time further ahead.
// RetryAfter and ResetAfter count from now, on the clock that must reach
// them.
func (s *Spec) step(st *State, now, n int64, take bool) outcome {
	switch s.Algorithm {
	case AlgorithmTokenBucket:
		return s.stepTokenBucket(st, now, n, take)
	case AlgorithmGCRA:
		return s.stepGCRA(st, now, n, take)
	case AlgorithmFixedWindow:
		return s.stepFixedWindow(st, now, n, take)
	case AlgorithmSlidingWindowLog:
		return s.stepSlidingWindowLog(st, now, n, take)
	case AlgorithmSlidingWindowCounter:
		return s.stepSlidingWindowCounter(st, now, n, take)
	case AlgorithmLeakyBucket:
		return s.stepLeakyBucket(st, now, n, take)
	}
	panic("ratekeeper: Step on an invalid Spec: " + s.Algorithm)
}

// outcome is a decision in a Spec's integer units: remaining in
// millionths, retryAfter and resetAfter in microseconds. The models return
// it rather than a Result: a struct of four words passes through calls in
// registers, and a Result is copied through memory at every call.
type outcome struct {
	allowed                           bool
	remaining, retryAfter, resetAfter int64
}

// result builds the Result of an outcome under s.
func (o outcome) result(s *Spec) Result {
	return s.Result(o.allowed, o.remaining, o.retryAfter, o.resetAfter)
}

// Result builds a Result from a decision in the Spec's integer units:
// remaining in millionths, retryAfter and resetAfter in microseconds.
// Stores use it so that every store reports the same values.
func (s *Spec) Result(allowed bool, remaining, retryAfter, resetAfter int64) Result {
	return Result{
		Policy:     s.Name,
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

// mulDiv returns ⌊a·b/c⌋ for a, b >= 0, c > 0, exactly, where a·b may
// overflow 64 bits but the quotient does not. The scripts compute the same
// by long division in doubles.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// want is the cost a decision is evaluated for: a peek (n = 0) answers for
// a request of cost 1.
func want(n int64) int64 {
	if n == 0 {
		return 1
	}
	return n
}

// checkShape checks what every Spec shares: a Limit in range that is also
// the largest cost, and a Window (the time over which Limit is granted, in
// microseconds) that matches the parameters; a zero Window is filled in.
func checkShape(s *Spec, window int64) error {
	if err := checkLimit(s.Algorithm+" limit", s.Limit); err != nil {
		return err
	}
	if s.MaxCost != s.Limit {
		return fmt.Errorf("%w: %s MaxCost %d differs from its Limit %d", ErrInvalidPolicy, s.Algorithm, s.MaxCost, s.Limit)
	}
	if window <= 0 || window > maxPeriodMicros {
		return fmt.Errorf("%w: %s window of %v is out of range (longest %v)",
			ErrInvalidPolicy, s.Algorithm, time.Duration(window)*time.Microsecond, MaxPeriod)
	}
	w := time.Duration(window) * time.Microsecond
	if s.Window != 0 && s.Window != w {
		return fmt.Errorf("%w: %s Window %v does not match its parameters (%v)", ErrInvalidPolicy, s.Algorithm, s.Window, w)
	}
	s.Window = w
	return nil
}

// maxPeriodMicros is MaxPeriod in microseconds.
const maxPeriodMicros = int64(MaxPeriod / time.Microsecond)

// maxTimeMicros is 2200-01-01 00:00:00 UTC in microseconds since the Unix
// epoch, the end of the times a store may decide at. A state holds times
// up to the latest clock reading plus MaxPeriod, and the models add at most
// another MaxPeriod to them: below 7.9·10^15, exact in a double (2^53 is
// about 9.0·10^15, in the year 2255).
const maxTimeMicros = 7_258_118_400_000_000

// CheckTime reports whether now, in microseconds since the Unix epoch, is
// a time stores can decide at: after 1970-01-01 00:00:00 UTC and before
// 2200-01-01 00:00:00 UTC. A store checks every time it reads from a
// clock it was given; outside the range, whose values a script cannot keep
// exactly (or at all: states hold no negative times), a decision is an
// error wrapping ErrInvalidTime, never one made on a misread state.
func CheckTime(now int64) error {
	if now <= 0 || now >= maxTimeMicros {
		return timeError(now)
	}
	return nil
}

// timeError is CheckTime's error, apart so that CheckTime inlines.
func timeError(now int64) error {
	return fmt.Errorf("%w: %v (%dµs since the Unix epoch)", ErrInvalidTime, time.UnixMicro(now).UTC(), now)
}
