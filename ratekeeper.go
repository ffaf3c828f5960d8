// Package ratekeeper is a distributed rate limiter.
//
// A Limiter applies one Policy (such as a TokenBucket) to any number of
// keys, one per caller. It asks a Store for every decision: redisstore makes
// the decision atomically inside Redis with a Lua script, so any number of
// application servers share one limit; memstore makes the same decision in
// process, with the same Go model the scripts are tested against.
//
//	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{
//		Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
//	res, err := lim.Allow(ctx, "user:123")     // cost 1
//	res, err = lim.AllowN(ctx, "user:123", 5)  // cost 5, all or nothing
//	res, err = lim.Peek(ctx, "user:123")       // consumes nothing
//	err = lim.Reset(ctx, "user:123")
//	err = lim.Wait(ctx, "user:123")            // blocks until allowed
//
// The policies are TokenBucket (the classic, with discrete refills), GCRA
// (a continuously refilled bucket in one integer), FixedWindow,
// SlidingWindowLog (exact), SlidingWindowCounter (a weighted estimate in
// one small key) and LeakyBucket (policing).
//
// Every decision is exact: a denied request consumes nothing, a cost is
// taken whole or not at all, and Result.RetryAfter is the true time until
// the same request could pass. Time is the store's: Redis's server clock
// for redisstore, so application servers with skewed clocks agree.
package ratekeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Errors. Test for them with errors.Is; the returned errors carry the
// details. Those of input that can never succeed (ErrInvalidPolicy to
// ErrInvalidTime) are also the stores', from the checks of package
// driver.
var (
	// ErrInvalidPolicy: a policy's parameters are out of range. The
	// error is a *PolicyError, which names the field.
	ErrInvalidPolicy = driver.ErrInvalidSpec
	// ErrInvalidKey: a key is empty or longer than MaxKeyLen.
	ErrInvalidKey = driver.ErrInvalidKey
	// ErrInvalidCost: a cost is negative or more than the policy can ever
	// admit. The latter also matches ErrCostTooHigh.
	ErrInvalidCost = driver.ErrInvalidCost
	// ErrCostTooHigh: a cost is larger than the policy can ever admit (for
	// a TokenBucket, more than its Capacity), so waiting would not help.
	ErrCostTooHigh = driver.ErrCostTooHigh
	// ErrInvalidTime: a store's clock (one given with a store's WithClock)
	// reads a time outside the range stores decide at, 1970 to 2200.
	// Nothing is decided, nor taken.
	ErrInvalidTime = driver.ErrInvalidTime

	// ErrNoCharges: the Limiter's Store is not a driver.Charger, so it
	// cannot take costs known afterwards. It wraps errors.ErrUnsupported.
	ErrNoCharges = fmt.Errorf("ratekeeper: the store takes no charges or refunds: %w", errors.ErrUnsupported)
	// ErrNoLeases: a Limiter was asked to take leases from a Store that
	// is not a driver.Leaser. It wraps errors.ErrUnsupported.
	ErrNoLeases = fmt.Errorf("ratekeeper: the store takes no leases: %w", errors.ErrUnsupported)

	// ErrSettled: Settle or Cancel on a Reservation that was already
	// settled or cancelled. Nothing is taken or given back again.
	ErrSettled = errors.New("ratekeeper: reservation already settled")
	// ErrNotReserved: Settle or Cancel on a Reservation whose estimate was
	// denied, which holds nothing to settle. Nothing is taken or given
	// back.
	ErrNotReserved = errors.New("ratekeeper: the reservation was denied: nothing to settle")

	// ErrNoSlots: TryAcquire found every slot of the key held, or
	// holders of a Semaphore already waiting for one.
	ErrNoSlots = errors.New("ratekeeper: every in-flight slot is held")
	// ErrNoSlotStore: the Store is not a driver.Slots, so it holds no
	// in-flight slots. It wraps errors.ErrUnsupported.
	ErrNoSlotStore = fmt.Errorf("ratekeeper: the store holds no in-flight slots: %w", errors.ErrUnsupported)
)

// Result is the outcome of one decision.
type Result struct {
	// Policy is the name of the policy this Result describes (see Named
	// and WithName): for an All, the binding one.
	Policy string
	// Allowed reports whether the request may proceed. For a peek (cost 0)
	// it reports whether a request of cost 1 would be allowed now.
	Allowed bool
	// Limit is the policy's capacity, or its requests per window.
	Limit int64
	// Remaining is what is left after this decision, in requests of cost
	// 1: a request of any cost up to Remaining would pass now, and one of
	// more would not; below zero by the debt of a key that a Charge took
	// more from than it held. TokenBucket and LeakyBucket hold fractions
	// and report them, to the millionth, rounded down: a token bucket
	// refilling 0.1 token per interval reports 0.3, never 0. GCRA,
	// FixedWindow, SlidingWindowLog and SlidingWindowCounter report whole
	// requests: GCRA and SlidingWindowCounter round down what they hold
	// (a continuous refill, a weighted estimate), the other two count.
	Remaining float64
	// RetryAfter is 0 when allowed; otherwise the time until the same
	// request (for a peek, one of cost 1) could be allowed. After a Charge
	// or a Refund, it is the time until a request of cost 1 could pass (0
	// if one can now), whether or not the Charge fitted.
	RetryAfter time.Duration
	// ResetAfter is the time until the limiter is back to its full
	// capacity, as if the key had never been used.
	ResetAfter time.Duration
	// Parts holds, for an All, every policy's own Result, in the order
	// given to All; nil otherwise.
	Parts []Result
	// Capped reports a Charge that met the largest debt its policy can
	// hold (for an All, any of its policies): the cost was taken up to
	// that bound, and the rest of it was not counted. See Limiter.Charge.
	Capped bool
}

// Store decides requests for a Limiter and keeps the state of its keys:
// memstore and redisstore are two. Its methods, and the optional
// interfaces a store may also implement (several keys at once, charges
// and refunds), are those of package driver, which holds everything a
// Store is written with; its Decisions are what a Limiter makes its
// Results of (see Limiter.ResultOf).
type Store = driver.Store

// decisionResult is the Result of a store's Decision d under spec. A
// Decision that does not fit spec (an All's without one Outcome per
// part, or another spec's with Parts) is an error: the store is at fault.
func decisionResult(spec *driver.ValidSpec, d driver.Decision) (Result, error) {
	if d.Parts == nil && !spec.IsAll() {
		return resultOf(spec, d.Outcome), nil
	}
	if len(d.Parts) != spec.NumParts() || d.Binding < 0 || d.Binding >= len(d.Parts) {
		return Result{}, fmt.Errorf("ratekeeper: a store's decision of %d parts (binding %d) for a policy of %d parts",
			len(d.Parts), d.Binding, spec.NumParts())
	}
	parts := make([]Result, len(d.Parts))
	for i, o := range d.Parts {
		parts[i] = resultOf(spec.Part(i), o)
	}
	res := parts[d.Binding]
	res.Allowed = d.Allowed // after a Charge, n may not have fitted another part
	res.ResetAfter = time.Duration(d.ResetAfter) * time.Microsecond
	res.Parts = parts
	for _, p := range parts {
		res.Capped = res.Capped || p.Capped
	}
	return res, nil
}

// resultOf is the Result of o under spec, a spec other than an All:
// Remaining in requests, times as Durations.
func resultOf(spec *driver.ValidSpec, o driver.Outcome) Result {
	return Result{
		Policy:     spec.Name(),
		Allowed:    o.Allowed,
		Limit:      spec.Limit(),
		Remaining:  float64(o.Remaining) / driver.Unit,
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(o.ResetAfter) * time.Microsecond,
		Capped:     o.Capped,
	}
}

// Limiter applies one Policy to many keys through a Store. It is safe for
// concurrent use by any number of goroutines.
type Limiter struct {
	store  Store
	policy Policy
	spec   *driver.ValidSpec
	name   string

	leaseOptions *Leases // WithLeases's, until New checks them
	leases       *leaser // nil without leases
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithName names the limiter's policy, for Results, response headers and
// metrics, as Named does. The default is the name given with Named, else
// the policy's algorithm, such as "token_bucket" ("all" for All).
//
// A store keeps a key's state per algorithm and name: limiters whose
// policies share both share the state of a key, whatever their limits
// (so a limit can be changed without resetting anyone; with redisstore's
// deny cache, a server keeps a denial it cached under the old limit until
// it runs out), and a name keeps a policy apart from others of its
// algorithm.
func WithName(name string) Option {
	return func(l *Limiter) { l.name = name }
}

// New returns a Limiter that applies policy to keys kept in store. It
// validates the policy (errors wrap ErrInvalidPolicy) and never contacts
// the store, so an application can start while Redis is down.
func New(store Store, policy Policy, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("ratekeeper: nil Store")
	}
	if policy == nil {
		return nil, policyError("", "", "nil Policy")
	}
	spec, err := policy.Spec()
	if err != nil {
		return nil, asPolicyError(err)
	}
	l := &Limiter{store: store, policy: policy}
	for _, opt := range opts {
		opt(l)
	}
	if l.name != "" {
		if why := driver.CheckName(l.name); why != "" {
			return nil, policyError("WithName", "", "name %s", why)
		}
		spec.Name = l.name
	}
	if spec.Name == "" {
		spec.Name = spec.Algorithm
	}
	// Also checks policies defined outside this package, and fills in
	// their Window.
	valid, err := driver.Validate(spec)
	if err != nil {
		return nil, asPolicyError(err)
	}
	l.spec, l.name = valid, spec.Name
	if l.leaseOptions != nil {
		if l.leases, err = newLeaser(store, valid, *l.leaseOptions); err != nil {
			return nil, err
		}
		l.leaseOptions = nil
	}
	return l, nil
}

// Close gives back what the Limiter's leases hold (see WithLeases) and
// stops their background work. A Limiter used after Close takes no more
// leases: the store decides each request, as without leases. Without
// leases Close does nothing. It returns the errors of the leases
// that could not be given back: the store counts those until their TTL
// ends.
func (l *Limiter) Close() error {
	if l.leases == nil {
		return nil
	}
	return l.leases.close()
}

// Policy returns the limiter's policy.
func (l *Limiter) Policy() Policy { return l.policy }

// Spec returns the validated, integer form of the limiter's policy, as its
// Store receives it; middleware reads its Window.
func (l *Limiter) Spec() *driver.ValidSpec { return l.spec }

// ResultOf is the Result the limiter makes of d, a Decision of its Store
// under its Spec, for callers that ask the Store themselves: for several
// keys or limiters in one call (driver.MultiDecider), as ratekeeper-server
// does. A Decision that does not fit the Spec (an All's without one
// Outcome per part, or another spec's with Parts) is an error: the store
// is at fault.
func (l *Limiter) ResultOf(d driver.Decision) (Result, error) {
	return decisionResult(l.spec, d)
}

// Name returns the limiter's name (see WithName).
func (l *Limiter) Name() string { return l.name }

// Allow reports whether one request for key may proceed now, and consumes
// one unit of the limit if so. It is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN reports whether a request of cost n for key may proceed now. The
// cost is taken whole or not at all; a denied request consumes nothing.
// n = 0 is Peek. A negative n, or one larger than the policy can ever
// admit, is an error wrapping ErrInvalidCost.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	if err := driver.CheckKey(key); err != nil {
		return Result{}, err
	}
	if err := driver.CheckCost(l.spec, n); err != nil {
		return Result{}, err
	}
	if l.leases != nil && n > 0 {
		return l.leases.allow(ctx, key, n)
	}
	d, err := l.store.Decide(ctx, key, l.spec, n)
	if err != nil {
		return Result{}, err
	}
	res, err := decisionResult(l.spec, d)
	if err == nil && l.leases != nil {
		res = l.leases.peek(key, res)
	}
	return res, err
}

// Peek reports key's current state without consuming anything. Allowed and
// RetryAfter answer for a request of cost 1. With leases, Remaining
// counts what this Limiter's lease of key holds, and a lease with units
// left allows.
func (l *Limiter) Peek(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 0)
}

// Reset forgets key's state, so it starts again at its full capacity.
// With leases, it drops this Limiter's lease of key; other Limiters'
// leases of key end within their TTL.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := driver.CheckKey(key); err != nil {
		return err
	}
	if l.leases != nil {
		l.leases.drop(key)
	}
	return l.store.Reset(ctx, key, l.spec)
}

// Wait blocks until one request for key is allowed, and consumes it. It is
// WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n for key is allowed, and consumes
// it; n = 0 returns at once. It returns ctx's error if ctx ends first, and returns at once, with
// an error matching context.DeadlineExceeded, when the wait would outlast
// ctx's deadline. Other waiters may take the allowance first, in which
// case WaitN waits again.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	if n == 0 {
		// Nothing to take: like AllowN, only the input is checked.
		if err := driver.CheckKey(key); err != nil {
			return err
		}
		return driver.CheckCost(l.spec, n)
	}
	var timer *time.Timer
	for {
		res, err := l.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		if res.Allowed {
			return nil
		}
		wait := res.RetryAfter
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return fmt.Errorf("ratekeeper: waiting %v for %q would outlast the context deadline: %w",
				wait, key, context.DeadlineExceeded)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
}
