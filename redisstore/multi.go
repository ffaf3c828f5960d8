package redisstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/driver"
)

// DecideAll decides reqs together, all or nothing: if every request is
// allowed, each takes its N; if any is denied, none takes anything, but
// the charges and refunds that requests' Modes ask for (see
// driver.MultiDecider, which says how they count). A request of N 0 only
// looks: it takes nothing, and denies the others only in debt.
// The i-th Decision is request i's own: for a request allowed in a batch
// that another denied, Allowed is true and the Decision reports the state
// as a peek of cost N would, nothing taken. An All spec in a request
// decides as in Decide, its Decision with Parts. Requests are decided in order, and
// a key's state shared by several requests (the same key under the same
// policy) is decided for each in turn: the second sees what the first
// would take. The deny cache is not consulted, and
// forgets the denials of the keys taken from, charged or refunded.
//
// Over a client of one server (a standalone Redis, or Sentinel's primary)
// the whole set is one script call, atomic. Over a Redis Cluster, it can
// only be atomic within a hash slot: requests are grouped by the slot of
// their key, each group is one atomic script call, and the groups go at
// once, in one pipeline per master: one round trip, which waits only for
// the masters of the keys. Across groups the guarantee is
// weaker: a group that denies takes nothing, but does not undo the takes
// of groups that allowed, and the i-th Decision then reports request i's group's
// decision (so every request reported allowed in a group of only allowed
// requests took its N). The same holds for a plain client of a cluster
// node, from the first call it refuses with CROSSSLOT; its groups are then
// sent again. When a group fails after another changed its keys (a
// master down, the others up), the error matches driver.ErrPartlyApplied.
//
// Validation is Decide's, for every request: an invalid key, cost or spec
// fails the whole call, with the same errors; so do more than
// driver.MaxRequests requests or driver.MaxRequestPolicies policies, with
// an error matching driver.ErrTooManyRequests. No request returns nil, nil.
// Like Decide, it goes through the pipeliner, and returns by the end of
// ctx.
func (s *Store) DecideAll(ctx context.Context, reqs []driver.Request) ([]driver.Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := driver.CheckRequests(reqs); err != nil {
		return nil, err
	}
	for i, r := range reqs {
		if _, err := scriptOf(r.Spec); err != nil {
			return nil, fmt.Errorf("%w (request %d)", err, i)
		}
	}
	var sent time.Time
	if s.now != nil {
		sent = s.now()
		if err := driver.CheckTime(sent.UnixMicro()); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
	}
	if err := s.breaker.check(); err != nil {
		return nil, fmt.Errorf("redisstore: DecideAll of %d requests: %w", len(reqs), err)
	}
	groups := s.multiGroups(reqs, sent, s.splitSlots.Load())
	defer s.forgetDenials(reqs)
	err := s.sendGroups(ctx, groups)
	if len(groups) == 1 && redis.HasErrorPrefix(err, "CROSSSLOT") {
		// A plain client of a cluster node: from now on, by slot.
		s.splitSlots.Store(true)
		groups = s.multiGroups(reqs, sent, true)
		err = s.sendGroups(ctx, groups)
	}
	if err != nil {
		s.breaker.failed(err)
		if partlyApplied(reqs, groups) {
			return nil, fmt.Errorf("redisstore: DecideAll of %d requests: %w (%w)", len(reqs), err, driver.ErrPartlyApplied)
		}
		return nil, fmt.Errorf("redisstore: DecideAll of %d requests: %w", len(reqs), err)
	}
	res := make([]driver.Decision, len(reqs))
	var out [driver.MaxRequestPolicies]driver.Outcome
	for _, g := range groups {
		parts := out[:g.policies]
		if err := parseOutcomes(g.call.reply, parts); err != nil {
			return nil, err
		}
		for _, i := range g.reqs {
			spec := reqs[i].Spec
			n := max(spec.NumParts(), 1)
			res[i] = spec.Decision(parts[:n])
			parts = parts[n:]
		}
	}
	return res, nil
}

// partlyApplied reports whether a failed DecideAll's groups changed keys
// all the same: a group whose call came back, and charged, refunded or
// took (see changed).
func partlyApplied(reqs []driver.Request, groups []multiGroup) bool {
	if len(groups) < 2 {
		return false
	}
	var out [driver.MaxRequestPolicies]driver.Outcome
	for _, g := range groups {
		if !g.call.finished() || g.call.err != nil || g.call.reply == nil {
			continue
		}
		parts := out[:g.policies]
		if parseOutcomes(g.call.reply, parts) == nil && changed(reqs, g.reqs, parts) {
			return true
		}
	}
	return false
}

// changed reports whether a group of requests, whose policies' Outcomes
// are parts, changed their keys, as driver.MultiDecider says they count:
// a charge or a refund always does; takes do when no part denied; a Take
// with ChargeOver does, denied, when it did not fit. A peek takes nothing.
func changed(reqs []driver.Request, group []int, parts []driver.Outcome) bool {
	denied := false
	rest := parts
	for _, i := range group {
		r := reqs[i]
		n := max(r.Spec.NumParts(), 1)
		for _, o := range rest[:n] {
			switch {
			case r.Act() == driver.Refund:
			case r.N == 0:
				denied = denied || o.Remaining < 0
			default:
				denied = denied || !o.Allowed
			}
		}
		rest = rest[n:]
	}
	rest = parts
	for _, i := range group {
		r := reqs[i]
		n := max(r.Spec.NumParts(), 1)
		own := rest[:n]
		rest = rest[n:]
		switch {
		case r.N == 0:
		case r.Act() != driver.Take || !denied:
			return true
		case r.ChargeOver && slices.ContainsFunc(own, func(o driver.Outcome) bool { return !o.Allowed }):
			return true
		}
	}
	return false
}

// multiGroup is one script call of a DecideAll: the requests it decides,
// in order, and their number of policies.
type multiGroup struct {
	call     *call
	reqs     []int
	policies int
}

// multiGroups builds the script calls of a DecideAll: one for all the
// requests, or, bySlot, one per hash slot of their keys.
func (s *Store) multiGroups(reqs []driver.Request, sent time.Time, bySlot bool) []multiGroup {
	var groups []multiGroup
	slots := map[uint16]int{} // slot -> index in groups
	for i, r := range reqs {
		g := 0
		if bySlot {
			slot := hashSlot(escapeBraces(r.Key))
			var ok bool
			if g, ok = slots[slot]; !ok {
				g = len(groups)
				slots[slot] = g
			}
		}
		if g == len(groups) {
			groups = append(groups, multiGroup{call: &call{alg: allScript, req: request{now: s.clockOf(sent), skew: s.skew, mode: driver.Take}}})
		}
		mg := &groups[g]
		mg.reqs = append(mg.reqs, i)
		mg.policies += max(r.Spec.NumParts(), 1)
		mg.call.keys = append(mg.call.keys, s.keys(r.Key, r.Spec)...)
		mg.call.req.appendParts(r.Spec, r.N)
		for range max(r.Spec.NumParts(), 1) {
			mg.call.req.modes = append(mg.call.req.modes, modeDigit(r))
		}
	}
	for _, g := range groups {
		if !slices.ContainsFunc(g.call.req.modes, func(d byte) bool { return d != '1' }) {
			g.call.req.modes = nil // all take: the request's mode
		}
	}
	return groups
}

// modeDigit is all.lua's mode of r's parts: 1 take, 2 charge, 3 refund,
// 4 take with ChargeOver.
func modeDigit(r driver.Request) byte {
	if m := r.Act(); m != driver.Take {
		return '0' + byte(m)
	}
	if r.ChargeOver {
		return '4'
	}
	return '1'
}

// forgetDenials drops the deny cache's denials of the keys that reqs
// charge, refund or take from, which may have made them wrong: a refund
// adds allowance, a charge or a take makes a denial last longer. It runs
// after the call, failed or not, as Decide's charges do.
func (s *Store) forgetDenials(reqs []driver.Request) {
	if s.denies == nil {
		return
	}
	for _, r := range reqs {
		switch {
		case r.Act() != driver.Take || r.ChargeOver:
			s.denies.forget(r.Spec, r.Key)
		case r.N > 0:
			s.denies.drop(r.Spec, r.Key)
		}
	}
}

// sendGroups sends the groups' calls, in one pipeline if several, and
// returns the first error.
func (s *Store) sendGroups(ctx context.Context, groups []multiGroup) error {
	calls := make([]*call, len(groups))
	for i, g := range groups {
		g.call.ctx = ctx
		calls[i] = g.call
	}
	if err := s.send(ctx, calls); err != nil {
		return err
	}
	for _, c := range calls {
		if c.err != nil {
			return c.err
		}
	}
	return nil
}
