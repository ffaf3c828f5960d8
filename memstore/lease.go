package memstore

import (
	"context"
	"fmt"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Lease makes the lease step req for key under spec, under the key's
// lock, with the Go model of its algorithm (driver.ValidSpec.Lease). A
// Limiter in the same process gains nothing from leasing from memstore;
// it takes leases so that a Limiter with leases runs on it as on Redis,
// and so that its model is what redisstore's scripts are tested against.
func (s *Store) Lease(_ context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	if err := driver.CheckLease(key, spec, req); err != nil {
		return driver.LeaseGrant{}, err
	}
	now := s.micros()
	if err := driver.CheckTime(now); err != nil {
		return driver.LeaseGrant{}, fmt.Errorf("memstore: %w", err)
	}
	p := spec.StateID()
	for {
		e := s.load(key)
		if e == nil {
			var st driver.State
			lease, o := spec.Lease(&st, now, req)
			g := grant(lease, o, now)
			if !st.Live {
				return g, nil // a fresh key keeps nothing that it did not take
			}
			e = &entry{key: key}
			e.add(slot{p, now + o.ResetAfter, st})
			if s.insert(e) {
				return g, nil
			}
			continue // the key came in meanwhile: decide on its state
		}
		e.mu.Lock()
		if e.dead() {
			e.mu.Unlock()
			continue
		}
		sl := e.find(p)
		added := sl == nil
		if added {
			sl = &slot{policy: p}
		}
		lease, o := spec.Lease(&sl.state, now, req)
		if sl.state.Live {
			// Only ever later: a give back brings the expiry closer, and
			// keeping the later one changes no decision.
			sl.expires = max(sl.expires, now+o.ResetAfter)
			if added {
				e.add(*sl)
			}
		}
		e.mu.Unlock()
		return grant(lease, o, now), nil
	}
}

// grant is the LeaseGrant of a lease step made at now.
func grant(lease driver.Lease, o driver.Outcome, now int64) driver.LeaseGrant {
	g := driver.LeaseGrant{Lease: lease, Decision: driver.Decision{Outcome: o}}
	if lease.Units > 0 {
		g.Lasts = lease.Expires - now
	}
	return g
}

var _ driver.Leaser = (*Store)(nil)
