package driver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/driver/drivertest"
)

// mapStore is a complete ratekeeper.Store: a map under a mutex, over the
// models. It keeps every key it took from forever; a real store would
// forget a state once its Outcome's ResetAfter has passed, which changes
// no decision.
type mapStore struct {
	now    func() time.Time
	mu     sync.Mutex
	states map[stateKey]*driver.State
}

// stateKey names one key's state under one policy: policies of equal
// StateIDs share it.
type stateKey struct {
	key string
	id  driver.StateID
}

func newMapStore(now func() time.Time) *mapStore {
	return &mapStore{now: now, states: map[stateKey]*driver.State{}}
}

// Decide checks its input, then decides in mode Take.
func (s *mapStore) Decide(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	if err := driver.CheckRequest(key, spec, n); err != nil {
		return driver.Decision{}, err
	}
	return s.decide(key, spec, n, driver.Take)
}

// Charge and Refund make the store a driver.Charger, an optional
// interface that Limiter.Charge and Limiter.Refund look for.
func (s *mapStore) Charge(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	if err := driver.CheckCharge(key, spec, n); err != nil {
		return driver.Decision{}, err
	}
	return s.decide(key, spec, n, driver.Charge)
}

func (s *mapStore) Refund(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	if err := driver.CheckCharge(key, spec, n); err != nil {
		return driver.Decision{}, err
	}
	return s.decide(key, spec, n, driver.Refund)
}

// decide reads the clock, and runs spec's model in mode on the states of
// its policies, under the lock.
func (s *mapStore) decide(key string, spec *driver.ValidSpec, n int64, mode driver.Mode) (driver.Decision, error) {
	now := s.now().UnixMicro()
	if err := driver.CheckTime(now); err != nil {
		return driver.Decision{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	policies := spec.Policies()
	sts := make([]*driver.State, len(policies))
	for i, p := range policies {
		k := stateKey{key, p.StateID()}
		if s.states[k] == nil {
			s.states[k] = new(driver.State)
		}
		sts[i] = s.states[k]
	}
	return spec.Decide(sts, now, n, mode), nil
}

// Reset forgets key's states under spec's policies.
func (s *mapStore) Reset(_ context.Context, key string, spec *driver.ValidSpec) error {
	if err := driver.CheckSpec(spec); err != nil {
		return err
	}
	if err := driver.CheckKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range spec.Policies() {
		delete(s.states, stateKey{key, p.StateID()})
	}
	return nil
}

// A store written from package driver alone: a Limiter uses it as it
// uses memstore or redisstore, and drivertest checks it (see
// TestMapStore).
func Example() {
	clock := time.Unix(1_900_000_000, 0)
	store := newMapStore(func() time.Time { return clock })
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{
		Capacity: 2, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		res, err := lim.Allow(ctx, "user:123")
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	}
	clock = clock.Add(time.Second)
	res, _ := lim.Allow(ctx, "user:123")
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	// Output:
	// true 1 0s
	// true 0 0s
	// false 0 1s
	// true 0 0s
}

// TestMapStore runs the conformance suite on the store of Example.
func TestMapStore(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, now func() time.Time) ratekeeper.Store {
		return newMapStore(now)
	})
}
