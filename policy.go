package ratekeeper

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// A Policy is a rate-limiting algorithm with its parameters, such as a
// TokenBucket. New validates it once, through its Spec.
type Policy interface {
	// Spec checks the policy's parameters and returns its integer form,
	// for the Limiter's Store. Errors wrap ErrInvalidPolicy; those of the
	// policies of this package are *PolicyError.
	Spec() (driver.Spec, error)
}

// Bounds and defaults of policies, keys, leases and in-flight slots. The
// bounds of policies keep every intermediate value of every model exact
// in a double (below 2^53), whatever the sequence of requests.
const (
	// MaxLimit is the largest Capacity or Limit a policy may have.
	MaxLimit = driver.MaxLimit
	// MaxPeriod is the longest time a policy may take to refill from empty.
	MaxPeriod = driver.MaxPeriod
	// MaxLeakyCapacity is the largest Capacity of a LeakyBucket.
	MaxLeakyCapacity = 1_000_000
	// MaxLogLimit is the largest Limit of a SlidingWindowLog, whose
	// memory grows with the number of requests in its window.
	MaxLogLimit = 10_000
	// MaxKeyLen is the longest key, in bytes, that a Limiter accepts.
	MaxKeyLen = driver.MaxKeyLen
	// MaxNameLen is the longest policy name, in bytes.
	MaxNameLen = driver.MaxNameLen

	// MaxLeaseTTL is the longest Leases.TTL.
	MaxLeaseTTL = driver.MaxLeaseTTL
	// DefaultLeaseKeys is the default Leases.MaxKeys.
	DefaultLeaseKeys = 10_000
	// LeaseSpend is the part of a lease's TTL, in percent, for which its
	// holder spends it. The rest is the margin by which the holder stops
	// before the store stops counting the lease: for the request's
	// time on the way, and for a holder's clock that runs up to that
	// much faster than the store's.
	LeaseSpend = 80

	// MaxSlots is the largest Concurrency.Limit.
	MaxSlots = driver.MaxSlots
	// MinSlotTTL and MaxSlotTTL bound Concurrency.TTL.
	MinSlotTTL = driver.MinSlotTTL
	MaxSlotTTL = driver.MaxSlotTTL
	// DefaultConcurrencyTTL is the TTL of a Concurrency that gives none.
	DefaultConcurrencyTTL = 30 * time.Second
)

// A PolicyError is a policy New refused: which policy, which of its
// fields, and why. It matches ErrInvalidPolicy. Callers that explain the
// error in their own words test Bound and Limit, never Reason's text.
type PolicyError struct {
	// Policy is the policy's type, such as "TokenBucket", or "All" or
	// "Named"; for a policy defined elsewhere, its algorithm.
	Policy string
	// Field is the field at fault, such as "RefillRate"; "" when the
	// policy as a whole is.
	Field string
	// Reason says why, such as "must be positive, got 0s".
	Reason string
	// Bound is the bound that Field broke; driver.NoBound when the error
	// is of another kind (a policy of the wrong form, a nil policy).
	Bound driver.Bound
	// Limit is the bound's value (not the field's), in the field's units
	// as its Param has them, durations in seconds: 1 for a Capacity below
	// 1, MaxLimit above it; 1e-6 for a RefillInterval finer than a
	// microsecond, or a RefillRate finer than a millionth; for
	// driver.BoundRate, the largest Rate of the Period; for
	// driver.BoundPeriod, MaxPeriod.
	Limit float64
}

// Error reads "ratekeeper: invalid policy: TokenBucket RefillRate must be
// ...".
func (e *PolicyError) Error() string {
	msg := ErrInvalidPolicy.Error() + ":"
	for _, part := range [...]string{e.Policy, e.Field, e.Reason} {
		if part != "" {
			msg += " " + part
		}
	}
	return msg
}

// Unwrap makes a PolicyError match ErrInvalidPolicy.
func (e *PolicyError) Unwrap() error { return ErrInvalidPolicy }

// policyError returns a *PolicyError of no bound.
func policyError(policy, field, format string, args ...any) error {
	return &PolicyError{Policy: policy, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// boundError returns a *PolicyError for a bound broken.
func boundError(policy, field string, bound driver.Bound, limit float64, format string, args ...any) error {
	return &PolicyError{Policy: policy, Field: field, Reason: fmt.Sprintf(format, args...), Bound: bound, Limit: limit}
}

// rangeError returns the *PolicyError of n outside lo..hi.
func rangeError(policy, field string, lo, hi, n int64) error {
	bound, limit := driver.BoundMin, lo
	if n > hi {
		bound, limit = driver.BoundMax, hi
	}
	return boundError(policy, field, bound, float64(limit), "must be between %d and %d, got %d", lo, hi, n)
}

// asPolicyError turns an error of driver.Validate into one matching
// ErrInvalidPolicy, a *PolicyError.
func asPolicyError(err error) error {
	var pe *PolicyError
	if errors.As(err, &pe) {
		return err
	}
	var se *driver.SpecError
	if errors.As(err, &se) {
		return &PolicyError{Policy: se.Algorithm, Field: se.Field, Reason: se.Reason}
	}
	if errors.Is(err, ErrInvalidPolicy) {
		return err
	}
	return &PolicyError{Reason: err.Error()}
}

// Aliases of the driver's names, for the models in this package.
type (
	state   = driver.State
	outcome = driver.Outcome
)

// unit is driver.Unit: token amounts are counted in millionths.
const unit = driver.Unit

// micros converts a duration to whole microseconds, failing on durations
// that are not positive or have a fraction of a microsecond.
func micros(policy, field string, d time.Duration) (int64, error) {
	if d <= 0 {
		return 0, boundError(policy, field, driver.BoundMin, 0, "must be positive, got %v", d)
	}
	if d%time.Microsecond != 0 {
		return 0, boundError(policy, field, driver.BoundResolution, 1e-6, "%v is not a whole number of microseconds", d)
	}
	return int64(d / time.Microsecond), nil
}

// millionths converts a positive token amount to fixed point, rounding to
// the nearest millionth.
func millionths(policy, field string, x float64) (int64, error) {
	switch {
	case math.IsNaN(x):
		return 0, policyError(policy, field, "must be a positive finite number, got %v", x)
	case x <= 0:
		return 0, boundError(policy, field, driver.BoundMin, 0, "must be a positive finite number, got %v", x)
	case math.IsInf(x, 1):
		return 0, boundError(policy, field, driver.BoundMax, MaxLimit, "must be a positive finite number, got %v", x)
	case x > MaxLimit:
		return 0, boundError(policy, field, driver.BoundMax, MaxLimit, "%v is above the maximum %d", x, MaxLimit)
	}
	fp := int64(math.Round(x * unit))
	if fp == 0 {
		return 0, boundError(policy, field, driver.BoundResolution, 1e-6, "%v is below the resolution of 1e-6", x)
	}
	return fp, nil
}

// checkLimit rejects limits outside 1..MaxLimit.
func checkLimit(policy, field string, n int64) error {
	if n <= 0 || n > MaxLimit {
		return rangeError(policy, field, 1, MaxLimit, n)
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

// maxPeriodMicros is MaxPeriod in microseconds.
const maxPeriodMicros = int64(MaxPeriod / time.Microsecond)

// withWindow returns s with the Window that check finds, or check's error:
// what a policy's Spec returns.
func withWindow(s driver.Spec, check func(*driver.Spec) (int64, error)) (driver.Spec, error) {
	w, err := check(&s)
	if err != nil {
		return driver.Spec{}, err
	}
	s.Window = time.Duration(w) * time.Microsecond
	return s, nil
}
