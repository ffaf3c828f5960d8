package redisstore

import (
	"context"
	"fmt"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Lease makes the lease step req for key under spec in one script call,
// pipelined as Decide's: it gives back req.Back, then takes a lease of up
// to req.Want units, whose hold the key's state counts until the lease is
// given back or expires, on Redis's clock (or the store's WithClock). A
// lease taken drops the key's cached denial, as a take does; one given
// back forgets it, as a refund does.
func (s *Store) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	alg, err := scriptOf(spec)
	if err == nil {
		err = driver.CheckLease(key, spec, req)
	}
	if err != nil {
		return driver.LeaseGrant{}, err
	}
	if alg.lease == nil {
		return driver.LeaseGrant{}, fmt.Errorf("redisstore: %w: no lease script for %q", driver.ErrNoLeases, spec.Algorithm())
	}
	sent := s.clock()
	if s.now != nil {
		if err := driver.CheckTime(sent.UnixMicro()); err != nil {
			return driver.LeaseGrant{}, fmt.Errorf("redisstore: %w", err)
		}
	}
	if err := s.breaker.check(); err != nil {
		return driver.LeaseGrant{}, fmt.Errorf("redisstore: lease of %q: %w", key, err)
	}
	c := &call{alg: alg.lease, keys: s.keys(key, spec), ctx: ctx,
		req: request{now: s.clockOf(sent), skew: s.skew, lease: &req}}
	c.req.parts = c.req.one[:0]
	c.req.appendParts(spec, req.Min)
	err = s.send(ctx, []*call{c})
	if err == nil {
		err = c.err
	}
	if s.denies != nil {
		if req.Back.Units > 0 {
			s.denies.forget(spec, key) // failed or not, as a refund's
		} else if req.Want > 0 {
			s.denies.drop(spec, key)
		}
	}
	if err != nil {
		s.breaker.failed(err)
		return driver.LeaseGrant{}, fmt.Errorf("redisstore: lease of %q: %w", key, err)
	}
	return parseLease(spec, c.reply)
}

// parseLease reads lease.lua's reply: the lease's units, expiry and time
// to expiry, then the four integers of a take.
func parseLease(spec *driver.ValidSpec, reply any) (driver.LeaseGrant, error) {
	fields, ok := reply.([]any)
	if !ok || len(fields) != 7 {
		return driver.LeaseGrant{}, fmt.Errorf("%w: %v", errReply, reply)
	}
	var lease [3]int64
	for i := range lease {
		if lease[i], ok = fields[i].(int64); !ok || lease[i] < 0 || lease[i] >= 1<<53 {
			return driver.LeaseGrant{}, fmt.Errorf("%w: %v", errReply, reply)
		}
	}
	d, err := parseReply(spec, fields[3:])
	if err != nil {
		return driver.LeaseGrant{}, err
	}
	return driver.LeaseGrant{Lease: driver.Lease{Units: lease[0], Expires: lease[1]}, Lasts: lease[2], Decision: d}, nil
}

var _ driver.Leaser = (*Store)(nil)
