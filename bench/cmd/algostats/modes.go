package main

import (
	"context"

	"github.com/ratekeeper/ratekeeper"
)

// costMode is -mode: what each timed decision is.
var costMode string

// decideFunc is a decision for a caller: whether it was allowed.
type decideFunc = func(ctx context.Context, caller string) (bool, error)

// mode makes a limiter's timed decision, and what comes before it.
type mode struct {
	decide, prepare func(lim *ratekeeper.Limiter) decideFunc
}

// nothing is a mode's step that does not exist.
func nothing(*ratekeeper.Limiter) decideFunc { return nil }

// costOf makes a decision of cost 1 of a Limiter's method, such as
// (*ratekeeper.Limiter).Charge.
func costOf(method func(*ratekeeper.Limiter, context.Context, string, int64) (ratekeeper.Result, error)) func(*ratekeeper.Limiter) decideFunc {
	return func(lim *ratekeeper.Limiter) decideFunc {
		return func(ctx context.Context, caller string) (bool, error) {
			res, err := method(lim, ctx, caller, 1)
			return res.Allowed, err
		}
	}
}

var (
	charge = costOf((*ratekeeper.Limiter).Charge)
	refund = costOf((*ratekeeper.Limiter).Refund)
)

// modes are -mode's values. A refund is timed on keys that a charge of
// the same sequence filled, so that it has something to give back.
var modes = map[string]mode{
	"take":   {decide: nothing, prepare: nothing},
	"charge": {decide: charge, prepare: nothing},
	"refund": {decide: refund, prepare: charge},
}
