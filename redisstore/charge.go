package redisstore

import (
	"context"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Charge takes n from key under spec whether or not it fits, in one
// script call, pipelined and batched as Decide's, as
// ratekeeper.Limiter.Charge says. It forgets the key's cached denial.
func (s *Store) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideMode(ctx, key, spec, n, driver.Charge)
}

// Refund gives up to n back to key under spec, in one script call, as
// ratekeeper.Limiter.Refund says. It forgets the key's cached denial,
// which the refund may have made wrong.
func (s *Store) Refund(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideMode(ctx, key, spec, n, driver.Refund)
}

var _ driver.Charger = (*Store)(nil)
