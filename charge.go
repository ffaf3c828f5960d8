package ratekeeper

import (
	"context"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Charge takes a cost n for key that is known only after the request ran:
// the tokens a response used, the bytes a download sent. It always takes
// n, whether or not n fits in what is left, for every policy of an All;
// Allowed reports whether it fitted. A key charged more than it held is in
// debt: Remaining is below zero by the debt (−15 after a Charge of 25 on a
// fresh limit of 10), RetryAfter is the time until a request of cost 1
// could pass again (0 if one can now, even when n did not fit), and later
// requests are denied until time has repaid the debt. A FixedWindow forgets its debt when its window ends.
//
// Each algorithm holds a debt up to a bound that keeps its state exact
// (docs/algorithms.md states each): a Charge beyond it takes its cost up
// to the bound, and reports so with Result.Capped. n = 0 is Peek. A
// negative n, or one above MaxLimit, is an error wrapping ErrInvalidCost;
// a Store that is not a driver.Charger fails with ErrNoCharges.
func (l *Limiter) Charge(ctx context.Context, key string, n int64) (Result, error) {
	c, err := l.charger(ctx, key, n)
	if err != nil {
		return Result{}, err
	}
	d, err := c.Charge(ctx, key, l.spec, n)
	if err != nil {
		return Result{}, err
	}
	return decisionResult(l.spec, d)
}

// Refund gives back up to n to key: a cost taken that should not count,
// such as that of a request that failed, or the rest of one reserved in
// advance. It never makes the policy hold more than when full: a bucket
// never above its capacity, a window's count never below zero, a GCRA's
// theoretical arrival time never before now, and a SlidingWindowLog takes
// the units back from its newest entries. A refund on a key never used
// changes nothing. The Result is that of a Peek after the refund. n = 0 is
// Peek; the errors are Charge's.
func (l *Limiter) Refund(ctx context.Context, key string, n int64) (Result, error) {
	c, err := l.charger(ctx, key, n)
	if err != nil {
		return Result{}, err
	}
	d, err := c.Refund(ctx, key, l.spec, n)
	if err != nil {
		return Result{}, err
	}
	return decisionResult(l.spec, d)
}

// charger checks a charge's or a refund's input, gives back the key's
// lease, if any, and returns the Store's Charger.
func (l *Limiter) charger(ctx context.Context, key string, n int64) (driver.Charger, error) {
	if err := driver.CheckCharge(key, l.spec, n); err != nil {
		return nil, err
	}
	c, ok := l.store.(driver.Charger)
	if !ok {
		return nil, ErrNoCharges
	}
	if l.leases != nil {
		// The key's whole state, this Limiter's lease given back.
		if err := l.leases.giveBack(ctx, key); err != nil {
			return nil, err
		}
	}
	return c, nil
}
