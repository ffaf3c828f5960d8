package ratekeeper

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/ratekeeper/ratekeeper/driver"
)

// A Reservation is an estimate taken in advance for a request whose real
// cost is known only once it has run, such as the tokens of a language
// model's answer. Limiter.Reserve takes the estimate whole or not at all,
// like AllowN, so concurrent requests can never all pass a check before
// any of them is charged; Settle then charges the difference between the
// real cost and the estimate, or refunds it, and Cancel refunds the whole
// estimate.
//
// A Reservation is settled at most once: Settle and Cancel after the
// first of them fail with ErrSettled. One never settled nor cancelled
// keeps its estimate, as if the request had cost exactly that. A
// Reservation is safe for concurrent use.
type Reservation struct {
	lim      *Limiter
	key      string
	estimate int64
	res      Result
	settled  atomic.Bool
}

// Reserve takes estimate from key, all or nothing, as AllowN does, for a
// request whose real cost is settled afterwards with Settle. The
// Reservation's Result says whether the estimate was taken: when it was
// not, nothing was taken, and Settle and Cancel fail with ErrNotReserved.
// The errors are AllowN's, and ErrNoCharges for a Store that takes no
// charges or refunds (then nothing is taken). estimate = 0 takes nothing,
// and its Settle charges the whole real cost.
//
//	r, err := lim.Reserve(ctx, "tenant:7", 1000) // the tokens an answer may use
//	if err != nil { ... }
//	if !r.Result().Allowed { ... } // 429, retry after r.Result().RetryAfter
//	used := callModel(ctx)
//	_, err = r.Settle(ctx, used) // charges used-1000, or refunds 1000-used
func (l *Limiter) Reserve(ctx context.Context, key string, estimate int64) (*Reservation, error) {
	if _, ok := l.store.(driver.Charger); !ok {
		return nil, ErrNoCharges
	}
	res, err := l.AllowN(ctx, key, estimate)
	if err != nil {
		return nil, err
	}
	return &Reservation{lim: l, key: key, estimate: estimate, res: res}, nil
}

// Result returns the Result of the Reservation's decision: Allowed says
// whether the estimate was taken.
func (r *Reservation) Result() Result { return r.res }

// Key returns the key the Reservation was taken from.
func (r *Reservation) Key() string { return r.key }

// Estimate returns the cost the Reservation took, or would have taken
// when denied.
func (r *Reservation) Estimate() int64 { return r.estimate }

// Settle makes the reservation cost actual rather than its estimate: it
// charges actual − estimate when actual is larger (always taken, into
// debt if need be, as Limiter.Charge), and refunds estimate − actual when
// it is smaller (as Limiter.Refund). With actual equal to the estimate it
// touches nothing in the store and returns the Reservation's Result;
// otherwise it returns the Result of the charge or the refund.
//
// Settle settles the Reservation once: a second Settle, or one after
// Cancel, fails with ErrSettled; on a denied Reservation it fails with
// ErrNotReserved. A negative actual is an error wrapping ErrInvalidCost,
// and leaves the Reservation unsettled. A Settle whose store call fails
// (a timeout, say, after which Redis may still have run it) counts as
// made, so that trying again can never charge or refund twice: if the
// call never reached the store, the estimate stands.
func (r *Reservation) Settle(ctx context.Context, actual int64) (Result, error) {
	switch {
	case actual < 0:
		return Result{}, fmt.Errorf("%w: negative actual cost %d", ErrInvalidCost, actual)
	case actual-r.estimate > MaxLimit:
		return Result{}, fmt.Errorf("%w: actual cost %d is more than %d above the estimate %d", ErrInvalidCost, actual, MaxLimit, r.estimate)
	}
	if err := r.settle(); err != nil {
		return Result{}, err
	}
	switch diff := actual - r.estimate; {
	case diff > 0:
		return r.lim.Charge(ctx, r.key, diff)
	case diff < 0:
		return r.lim.Refund(ctx, r.key, -diff)
	}
	return r.res, nil
}

// Cancel gives the whole estimate back, as Settle(ctx, 0) would, for a
// request that never ran. Its errors are Settle's.
func (r *Reservation) Cancel(ctx context.Context) error {
	if err := r.settle(); err != nil {
		return err
	}
	if r.estimate == 0 {
		return nil
	}
	_, err := r.lim.Refund(ctx, r.key, r.estimate)
	return err
}

// settle marks the Reservation settled, or says why it cannot be.
func (r *Reservation) settle() error {
	if !r.res.Allowed {
		return ErrNotReserved
	}
	if !r.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	return nil
}

// Settled reports whether the Reservation was settled or cancelled.
func (r *Reservation) Settled() bool { return r.settled.Load() }
