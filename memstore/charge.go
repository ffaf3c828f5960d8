package memstore

import (
	"context"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Charge takes n from key under spec whether or not it fits, under the
// key's lock, as ratekeeper.Limiter.Charge says.
func (s *Store) Charge(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideNow(key, spec, n, driver.Charge)
}

// Refund gives up to n back to key under spec, under the key's lock, as
// ratekeeper.Limiter.Refund says.
func (s *Store) Refund(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideNow(key, spec, n, driver.Refund)
}

var _ driver.Charger = (*Store)(nil)
