package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// The second stage of a request: its resolved descriptors (resolve.go)
// decided by the store, within the store's time budget
// (decideInBudget), each rule's takes from its leases where it has them.
// Then answer.go answers.

// decide asks the store for every limited descriptor: enforced rules in
// one all-or-nothing decision, shadow and quota-mode rules in another, so
// that a rule that does not deny on its own never changes what the
// enforced ones take. The store's time is observed once for the request,
// both decisions together.
func (s *Service) decide(ctx context.Context, ds []descriptor) error {
	var enforced, shadow []int
	blocked := false // an enforced limit of 0 denies the request
	for i := range ds {
		r := ds[i].rule
		if r != nil && r.block && ds[i].hits > 0 && !ds[i].refund && r.enforced() {
			blocked = true
		}
		if r == nil || r.cfg.Unlimited || r.block {
			continue
		}
		if r.enforced() {
			enforced = append(enforced, i)
		} else {
			shadow = append(shadow, i)
		}
	}
	if len(enforced) == 0 && len(shadow) == 0 {
		return nil
	}
	start := time.Now()
	defer func() { s.opts.Metrics.storeLatency(time.Since(start)) }()
	if len(shadow) == 0 {
		return s.decideGroup(ctx, ds, enforced, blocked)
	}
	if len(enforced) == 0 {
		return s.decideGroup(ctx, ds, shadow, false)
	}
	// Both at once, so that they can share a round trip.
	var wg sync.WaitGroup
	var shadowErr error
	wg.Go(func() { shadowErr = s.decideGroup(ctx, ds, shadow, false) })
	err := s.decideGroup(ctx, ds, enforced, blocked)
	wg.Wait()
	// One call failed, the other may have taken: the request fails, and
	// is not undone.
	switch {
	case err == nil && shadowErr != nil && tookSome(ds, enforced):
		shadowErr = fmt.Errorf("%w (%w)", shadowErr, driver.ErrPartlyApplied)
	case err != nil && shadowErr == nil && tookSome(ds, shadow):
		err = fmt.Errorf("%w (%w)", err, driver.ErrPartlyApplied)
	}
	return errors.Join(err, shadowErr)
}

// tookSome reports whether the descriptors at idx, decided together,
// changed their keys, as driver.MultiDecider counts them: a charge or a
// refund always does; takes do when none of them was denied; a take that
// charges over the limit does when it did not fit.
func tookSome(ds []descriptor, idx []int) bool {
	denied := false
	for _, i := range idx {
		a, res := ds[i].asked, ds[i].res
		switch {
		case a.Act() == driver.Refund:
		case a.N == 0:
			denied = denied || res.Remaining < 0
		default:
			denied = denied || !res.Allowed
		}
	}
	for _, i := range idx {
		a := ds[i].asked
		switch {
		case a.N == 0:
		case a.Act() != driver.Take || !denied:
			return true
		case a.ChargeOver && !ds[i].res.Allowed:
			return true
		}
	}
	return false
}

// decideGroup decides the descriptors at idx together: all of them take
// their hits, or none does, but for charges and refunds (see
// Service.request). With denied, another descriptor of the request has
// already denied it: the others are only looked at.
func (s *Service) decideGroup(ctx context.Context, ds []descriptor, idx []int, denied bool) error {
	if len(idx) == 0 {
		return nil
	}
	reqs := make([]driver.Request, len(idx))
	// A cost above what a rule can ever admit is denied without asking.
	// When the request is denied so, or by a limit of 0, the descriptors
	// that take are only looked at, taking nothing.
	lookOnly := denied
	for j, i := range idx {
		reqs[j] = s.request(&ds[i])
		if reqs[j].Act() == driver.Take && ds[i].hits > ds[i].rule.spec.MaxCost() {
			lookOnly = true
		}
	}
	for j := range reqs {
		if lookOnly && reqs[j].Act() == driver.Take {
			reqs[j].N, reqs[j].ChargeOver = 0, false
		}
		ds[idx[j]].asked = reqs[j]
	}
	idx, reqs, err := s.chargeFromLeases(ctx, ds, idx, reqs)
	if err != nil || len(idx) == 0 {
		return err
	}
	if len(idx) > 1 && !lookOnly {
		if ok, err := s.decideLeased(ctx, ds, idx, reqs); ok || err != nil {
			return err
		}
	}
	if len(idx) == 1 {
		if d, r := &ds[idx[0]], reqs[0]; d.rule.leased && r.Mode == driver.Take && !r.ChargeOver && r.N > 0 {
			// Alone in its request, a take of a rule with leases is
			// decided from the rule's lease.
			res, err := d.rule.lim.AllowN(ctx, r.Key, r.N)
			if err != nil {
				return err
			}
			d.res, d.decided = res, true
			return nil
		}
		dec, ok, err := s.decideOne(ctx, reqs[0])
		if err != nil {
			return err
		}
		if ok {
			return s.record(&ds[idx[0]], dec)
		}
	}
	decs, err := s.store.DecideAll(ctx, reqs)
	if err == nil && len(decs) != len(reqs) {
		err = fmt.Errorf("server: the store decided %d of %d requests", len(decs), len(reqs))
	}
	if err != nil {
		return err
	}
	for j, i := range idx {
		if err := s.record(&ds[i], decs[j]); err != nil {
			return err
		}
	}
	return nil
}

// decideLeased decides a group of plain takes of which some are of rules
// with leases: those first, each from its rule's lease in process, then
// the others in the store at once, all or nothing across both. A take
// from a lease is a reservation (ratekeeper.Limiter.Reserve): when
// another descriptor denies the request, it is cancelled, given back to
// the store, so that the denied request takes nothing. Once one denies,
// the rest are only looked at. ok is false for a group it leaves to the
// store: none of its rules has leases, or one of its requests is not a
// plain take.
func (s *Service) decideLeased(ctx context.Context, ds []descriptor, idx []int, reqs []driver.Request) (ok bool, err error) {
	var leased, rest []int // positions in idx and reqs
	for j, i := range idx {
		if r := reqs[j]; r.Act() != driver.Take || r.ChargeOver || r.N == 0 {
			return false, nil
		}
		if ds[i].rule.leased {
			leased = append(leased, j)
		} else {
			rest = append(rest, j)
		}
	}
	if _, charger := s.store.(driver.Charger); len(leased) == 0 || !charger {
		return false, nil // a take given back is a refund
	}
	type take struct {
		d *descriptor
		r *ratekeeper.Reservation
	}
	var taken []take
	// giveBack cancels the takes, whatever ctx says: a denied request
	// takes nothing.
	giveBack := func() error {
		var errs []error
		for _, t := range taken {
			errs = append(errs, t.r.Cancel(context.WithoutCancel(ctx)))
			t.d.res.Remaining += float64(t.r.Estimate())
		}
		taken = nil
		return errors.Join(errs...)
	}
	denied := false
	for _, j := range leased {
		d, r := &ds[idx[j]], reqs[j]
		if denied {
			d.asked.N = 0
			res, err := d.rule.lim.Peek(ctx, r.Key)
			if err != nil {
				return true, errors.Join(err, giveBack())
			}
			d.res, d.decided = res, true
			s.judgePeek(d)
			continue
		}
		rv, err := d.rule.lim.Reserve(ctx, r.Key, r.N)
		if err != nil {
			return true, errors.Join(err, giveBack())
		}
		d.res, d.decided = rv.Result(), true
		if rv.Result().Allowed {
			taken = append(taken, take{d, rv})
			continue
		}
		denied = true
		if err := giveBack(); err != nil {
			return true, err
		}
	}
	if len(rest) == 0 {
		return true, nil
	}
	sub := make([]driver.Request, len(rest))
	for k, j := range rest {
		sub[k] = reqs[j]
		if denied {
			sub[k].N = 0
			ds[idx[j]].asked.N = 0
		}
	}
	decs, err := s.store.DecideAll(ctx, sub)
	if err == nil && len(decs) != len(sub) {
		err = fmt.Errorf("server: the store decided %d of %d requests", len(decs), len(sub))
	}
	if err != nil {
		return true, errors.Join(err, giveBack())
	}
	for k, j := range rest {
		if err := s.record(&ds[idx[j]], decs[k]); err != nil {
			return true, errors.Join(err, giveBack())
		}
		denied = denied || !decs[k].Allowed
	}
	if denied {
		return true, giveBack()
	}
	return true, nil
}

// chargeFromLeases decides the charges of rules with leases (envoy's
// counting of denied hits, -denied-hits all, where every hit counts): a
// charge that fits takes from the rule's lease in process, as a take
// does; one that does not is charged in the store, into debt if need be
// (ratekeeper.Limiter.Charge, which gives the lease back first). Charges
// are not all or nothing, so each is decided on its own. It returns the
// requests left to decide, and their places.
func (s *Service) chargeFromLeases(ctx context.Context, ds []descriptor, idx []int, reqs []driver.Request) ([]int, []driver.Request, error) {
	var leftIdx []int
	var left []driver.Request
	for j, i := range idx {
		d, r := &ds[i], reqs[j]
		if !d.rule.leased || r.Mode != driver.Charge || r.N == 0 || r.N > d.rule.spec.MaxCost() {
			leftIdx, left = append(leftIdx, i), append(left, r)
			continue
		}
		res, err := d.rule.lim.AllowN(ctx, r.Key, r.N)
		if err == nil && !res.Allowed {
			res, err = d.rule.lim.Charge(ctx, r.Key, r.N)
			res.Allowed = false // it did not fit: over its limit
		}
		if err != nil {
			return nil, nil, err
		}
		d.res, d.decided = res, true
	}
	return leftIdx, left, nil
}

// record keeps the store's Decision for d, as the descriptor's Result.
func (s *Service) record(d *descriptor, dec driver.Decision) error {
	res, err := d.rule.lim.ResultOf(dec)
	if err != nil {
		return err
	}
	d.res, d.decided = res, true
	s.judgePeek(d)
	return nil
}

// decideOne decides a lone request with the store's call for its mode,
// which is cheaper than a decision of several keys: ok is false when there
// is none (a ChargeOver, or a store that is no driver.Charger).
func (s *Service) decideOne(ctx context.Context, r driver.Request) (dec driver.Decision, ok bool, err error) {
	c, charger := s.store.(driver.Charger)
	switch m := r.Act(); {
	case m == driver.Take && !r.ChargeOver:
		dec, err = s.store.Decide(ctx, r.Key, r.Spec, r.N)
	case m == driver.Charge && charger:
		dec, err = c.Charge(ctx, r.Key, r.Spec, r.N)
	case m == driver.Refund && charger:
		dec, err = c.Refund(ctx, r.Key, r.Spec, r.N)
	default:
		return driver.Decision{}, false, nil
	}
	return dec, true, err
}

// judgePeek judges a descriptor that was only looked at, for a request
// denied before it was asked, against its real cost: a peek answers for
// a cost of 1.
func (s *Service) judgePeek(d *descriptor) {
	if d.asked.N == 0 && d.hits > 0 && !d.refund {
		d.res.Allowed = d.hits <= d.rule.spec.MaxCost() && d.res.Remaining >= float64(d.hits)
	}
}

// decideInBudget decides ds within the store's budget. A budget spent
// is a store failure like any other, which must not read as the caller's
// DEADLINE_EXCEEDED, since the caller's deadline has not passed.
func (s *Service) decideInBudget(ctx context.Context, ds []descriptor) error {
	budget := s.storeBudget(ctx)
	storeCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	err := s.decide(storeCtx, ds)
	// A connection's read deadline, set to the budget's, may fire before
	// the context's timer does: storeCtx may not have ended yet.
	if err != nil && ctx.Err() == nil && (storeCtx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
		spent := fmt.Errorf("the store did not answer within %v: %v", budget, err)
		if errors.Is(err, driver.ErrPartlyApplied) {
			return partlyApplied{spent}
		}
		return spent
	}
	return err
}

// partlyApplied is an error that matches driver.ErrPartlyApplied, and no
// other: its text says so already.
type partlyApplied struct{ error }

func (partlyApplied) Unwrap() error { return driver.ErrPartlyApplied }

// storeBudget is how long the store may take to decide a request: the
// lesser of StoreTimeout and three quarters of the caller's remaining
// deadline, so that a store that hangs (a paused Redis) leaves the
// service time to answer by OnStoreError before the caller gives up.
func (s *Service) storeBudget(ctx context.Context) time.Duration {
	budget := s.opts.StoreTimeout
	if deadline, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Duration(float64(time.Until(deadline))*storeShare))
	}
	return budget
}

// request is a descriptor's request to the store: its key, cost and how
// the cost counts, as the rule and Options.DeniedHits say. A refund
// (is_negative_hits, where refunds are on) gives its hits back whatever
// they say, up to the most one request of the rule may take: a refund
// gives back at most what a request could have taken, so that no single
// one wipes a debt that charges left.
func (s *Service) request(d *descriptor) driver.Request {
	r := driver.Request{Key: d.key, Spec: d.rule.spec, N: d.hits, Mode: driver.Take}
	switch {
	case d.hits == 0:
	case d.refund:
		r.Mode = driver.Refund
		r.N = min(r.N, d.rule.spec.MaxCost())
	case d.charge || d.rule.cfg.CountOverLimit || s.opts.CountOverLimit || s.opts.DeniedHits == DeniedCountAll:
		r.Mode = driver.Charge
	case s.opts.DeniedHits == DeniedCountOver:
		r.ChargeOver = true
		if d.hits > d.rule.spec.MaxCost() {
			// It cannot fit: it is over its limit, and charged.
			r.Mode, r.ChargeOver = driver.Charge, false
		}
	}
	if r.Mode != driver.Take {
		// A charge or a refund takes up to the most a store accepts.
		r.N = min(r.N, ratekeeper.MaxLimit)
	}
	return r
}
