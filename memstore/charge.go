package memstore

import (
	"context"
	"fmt"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Charge takes n from key under spec whether or not it fits, under the
// key's lock, as ratekeeper.Limiter.Charge says.
func (s *Store) Charge(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideCost(key, spec, n, driver.Charge)
}

// Refund gives up to n back to key under spec, under the key's lock, as
// ratekeeper.Limiter.Refund says.
func (s *Store) Refund(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideCost(key, spec, n, driver.Refund)
}

var _ driver.Charger = (*Store)(nil)

// decideCost checks a charge's or a refund's input and decides it.
func (s *Store) decideCost(key string, spec *driver.ValidSpec, n int64, mode driver.Mode) (driver.Decision, error) {
	if err := driver.CheckCharge(key, spec, n); err != nil {
		return driver.Decision{}, err
	}
	now := s.micros()
	if err := driver.CheckTime(now); err != nil {
		return driver.Decision{}, fmt.Errorf("memstore: %w", err)
	}
	return s.decideMode(key, spec, now, n, mode), nil
}
