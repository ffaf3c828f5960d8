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

// decide asks the store for every limited descriptor: enforced rules in
// one all-or-nothing decision, shadow and quota-mode rules in another, so
// that a rule that does not deny on its own never changes what the
// enforced ones take.
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
	return errors.Join(err, shadowErr)
}

// decideGroup decides the descriptors at idx together: all of them take
// their hits, or none does, but for charges and refunds (see
// Service.request). With denied, another descriptor of the request has
// already denied it: the others are only looked at.
func (s *Service) decideGroup(ctx context.Context, ds []descriptor, idx []int, denied bool) error {
	if len(idx) == 0 {
		return nil
	}
	start := time.Now()
	defer func() { s.opts.Metrics.storeLatency(time.Since(start)) }()
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
	if len(idx) == 1 && reqs[0].Act() == driver.Take && !reqs[0].ChargeOver {
		d := &ds[idx[0]]
		dec, err := s.store.Decide(ctx, d.key, d.rule.spec, reqs[0].N)
		if err != nil {
			return err
		}
		if d.res, err = ratekeeper.ResultOf(d.rule.spec, dec); err != nil {
			return err
		}
		d.decided = true
		s.judgePeek(d)
		return nil
	}
	decs, err := s.store.DecideAll(ctx, reqs)
	if err == nil && len(decs) != len(reqs) {
		err = fmt.Errorf("server: the store decided %d of %d requests", len(decs), len(reqs))
	}
	if err != nil {
		return err
	}
	for j, i := range idx {
		d := &ds[i]
		if d.res, err = ratekeeper.ResultOf(reqs[j].Spec, decs[j]); err != nil {
			return err
		}
		d.decided = true
		s.judgePeek(d)
	}
	return nil
}

// judgePeek judges a descriptor that was only looked at, for a request
// denied before it was asked, against its real cost: a peek answers for
// a cost of 1.
func (s *Service) judgePeek(d *descriptor) {
	if d.asked.N == 0 && d.hits > 0 && !d.refund {
		d.res.Allowed = d.hits <= d.rule.spec.MaxCost() && d.res.Remaining >= float64(d.hits)
	}
}
