package memstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/ratekeeper/ratekeeper/driver"
)

// slotTable holds the in-flight slots of every key (see driver.Slots):
// per key and name, each holder's lease by the time it ends, in
// microseconds. Ended leases are dropped by the next call on their key,
// and by Sweep. Slots are never evicted: that would admit more than the
// limit.
type slotTable struct {
	mu     sync.Mutex
	leases map[slotKey]map[string]int64
}

type slotKey struct{ key, name string }

var _ driver.Slots = (*Store)(nil)

// slotNow checks a slot call's input and reads the clock.
func (s *Store) slotNow(key string, spec driver.SlotSpec, holder string) (int64, error) {
	if err := driver.CheckSlot(key, spec, holder); err != nil {
		return 0, err
	}
	now := s.micros()
	if err := driver.CheckTime(now); err != nil {
		return 0, fmt.Errorf("memstore: %w", err)
	}
	return now, nil
}

// live returns key's leases, those ended at now dropped; nil if none
// are left. s.slots.mu is held.
func (t *slotTable) live(k slotKey, now int64) map[string]int64 {
	held := t.leases[k]
	for h, end := range held {
		if end <= now {
			delete(held, h)
		}
	}
	if len(held) == 0 {
		delete(t.leases, k)
		return nil
	}
	return held
}

// AcquireSlot gives holder one of spec.Limit slots of key for spec.TTL,
// as driver.Slots says, under the table's lock.
func (s *Store) AcquireSlot(_ context.Context, key string, spec driver.SlotSpec, holder string) (driver.SlotGrant, error) {
	now, err := s.slotNow(key, spec, holder)
	if err != nil {
		return driver.SlotGrant{}, err
	}
	t := &s.slots
	t.mu.Lock()
	defer t.mu.Unlock()
	k := slotKey{key, spec.Name}
	held := t.live(k, now)
	if _, mine := held[holder]; mine || int64(len(held)) < spec.Limit {
		if held == nil {
			if t.leases == nil {
				t.leases = map[slotKey]map[string]int64{}
			}
			held = map[string]int64{}
			t.leases[k] = held
		}
		held[holder] = now + spec.TTL
		return driver.SlotGrant{Acquired: true, Held: int64(len(held))}, nil
	}
	first := int64(-1)
	for _, end := range held {
		if first < 0 || end < first {
			first = end
		}
	}
	return driver.SlotGrant{Held: int64(len(held)), RetryAfter: first - now}, nil
}

// RenewSlot extends holder's lease, as driver.Slots says.
func (s *Store) RenewSlot(_ context.Context, key string, spec driver.SlotSpec, holder string) (bool, error) {
	now, err := s.slotNow(key, spec, holder)
	if err != nil {
		return false, err
	}
	t := &s.slots
	t.mu.Lock()
	defer t.mu.Unlock()
	held := t.live(slotKey{key, spec.Name}, now)
	if _, mine := held[holder]; !mine {
		return false, nil
	}
	held[holder] = now + spec.TTL
	return true, nil
}

// ReleaseSlot gives holder's slot back, as driver.Slots says.
func (s *Store) ReleaseSlot(_ context.Context, key string, spec driver.SlotSpec, holder string) error {
	if err := driver.CheckSlot(key, spec, holder); err != nil {
		return err
	}
	t := &s.slots
	t.mu.Lock()
	defer t.mu.Unlock()
	k := slotKey{key, spec.Name}
	delete(t.leases[k], holder)
	if len(t.leases[k]) == 0 {
		delete(t.leases, k)
	}
	return nil
}

// sweepSlots drops every ended lease, and the keys left without one.
func (s *Store) sweepSlots() {
	now := s.micros()
	t := &s.slots
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.leases {
		t.live(k, now)
	}
}
