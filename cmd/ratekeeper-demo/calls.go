package main

import (
	"context"
	"sync/atomic"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// fullStore is a store with every optional interface, as memstore and
// redisstore are.
type fullStore interface {
	ratekeeper.Store
	driver.MultiDecider
	driver.Charger
	driver.Leaser
}

// countingStore counts the calls the demo's limiters make to its store,
// so that the page can show what leases save.
type countingStore struct {
	fullStore
	calls atomic.Int64
}

// counting wraps store to count its calls, or returns it and nil if it
// lacks an optional interface (the demo's stores have them all).
func counting(store ratekeeper.Store) (ratekeeper.Store, *atomic.Int64) {
	fs, ok := store.(fullStore)
	if !ok {
		return store, nil
	}
	c := &countingStore{fullStore: fs}
	return c, &c.calls
}

func (c *countingStore) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	c.calls.Add(1)
	return c.fullStore.Decide(ctx, key, spec, n)
}

func (c *countingStore) DecideAll(ctx context.Context, reqs []driver.Request) ([]driver.Decision, error) {
	c.calls.Add(1)
	return c.fullStore.DecideAll(ctx, reqs)
}

func (c *countingStore) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	c.calls.Add(1)
	return c.fullStore.Charge(ctx, key, spec, n)
}

func (c *countingStore) Refund(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	c.calls.Add(1)
	return c.fullStore.Refund(ctx, key, spec, n)
}

func (c *countingStore) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	c.calls.Add(1)
	return c.fullStore.Lease(ctx, key, spec, req)
}
