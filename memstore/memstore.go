// Package memstore is an in-process ratekeeper.Store, for a single
// instance or for tests. It runs the same Go models that the Lua scripts
// of redisstore are tested against, so both stores decide alike.
//
// Keys live in a sync.Map, which decisions read without locking. Each key
// has its own lock, over the states of every policy it is used under, so
// a decision on a key that exists takes no lock but that key's, and an
// All decides for all its policies at once under it. DecideAll decides
// on several keys at once under all their locks, taken in the order of
// the keys. Keys come and go under one lock for the whole store, which
// keeps their number within its bound (see WithMaxKeys). A key expires
// once all its states are full again (nothing is lost: a fresh key
// decides the same), and a background sweep frees the memory of expired
// keys.
package memstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Defaults for the options.
const (
	DefaultMaxKeys       = 1 << 20
	DefaultSweepInterval = time.Minute
)

// Store is an in-process ratekeeper.Store. It is safe for concurrent use.
// Call Close to stop its background sweep.
type Store struct {
	keys        sync.Map         // key -> *entry, live entries only
	now         func() time.Time // nil: the monotonic clock, from epoch
	epoch       time.Time
	epochMicros int64

	// mu is held to add or remove a key, never to decide on one that
	// exists.
	mu            sync.Mutex
	entries       []*entry // the entries of keys, densely, for sampling
	maxKeys       int
	evictions     atomic.Int64
	sweepInterval time.Duration
	stop          chan struct{}
	stopOnce      sync.Once
	done          chan struct{}

	slots slotTable // in-flight slots (see AcquireSlot)
}

var (
	_ driver.Store        = (*Store)(nil)
	_ driver.MultiDecider = (*Store)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithMaxKeys bounds the number of keys the store holds (default
// DefaultMaxKeys), whatever the number of policies each is used under.
// When a new key finds the store full, the store evicts, among 16 keys
// sampled at random, the one whose states would all be full first (an
// expired one, if any): the key that carries the least information. An
// evicted key starts again full. Memory stays bounded under any number of
// distinct keys; Evictions counts them.
func WithMaxKeys(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxKeys = n
		}
	}
}

// WithSweepInterval sets how often a background goroutine frees the
// memory of expired keys (default DefaultSweepInterval); 0 disables it.
// Expired keys are never used either way: they decide as fresh keys.
func WithSweepInterval(d time.Duration) Option {
	return func(s *Store) { s.sweepInterval = d }
}

// WithClock makes the store read the time from now instead of the system's
// monotonic clock, for deterministic tests. A time outside 1970 to 2200 is
// an error matching ratekeeper.ErrInvalidTime.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		maxKeys:       DefaultMaxKeys,
		epoch:         time.Now(),
		sweepInterval: DefaultSweepInterval,
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	s.epochMicros = s.epoch.UnixMicro()
	for _, opt := range opts {
		opt(s)
	}
	if s.sweepInterval > 0 {
		go s.sweepLoop()
	} else {
		close(s.done)
	}
	return s
}

// Close stops the background sweep. The store stays usable.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// MaxKeys returns the bound on the number of keys, as set by WithMaxKeys.
func (s *Store) MaxKeys() int { return s.maxKeys }

// Len returns the number of keys held, whatever the number of policies
// each is used under, expired ones included until swept.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// Evictions returns how many keys were evicted, before they expired,
// because the store was full.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// micros is the time in microseconds since the Unix epoch. By default it
// reads only the monotonic clock (time.Since), which costs half of
// time.Now and never jumps.
func (s *Store) micros() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.epochMicros + int64(time.Since(s.epoch)/time.Microsecond)
}

// load returns key's entry, or nil. The entry may be dead by the time its
// lock is taken.
func (s *Store) load(key string) *entry {
	if v, ok := s.keys.Load(key); ok {
		return v.(*entry)
	}
	return nil
}

// Decide runs spec's model for key under the key's lock. Input that a
// Limiter never passes on fails driver.CheckRequest, with its errors.
func (s *Store) Decide(_ context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideNow(key, spec, n, driver.Take)
}

// decideNow checks the input of a decision in mode (driver.CheckRequest
// for a Take, driver.CheckCharge for a Charge or a Refund), and decides it
// now.
func (s *Store) decideNow(key string, spec *driver.ValidSpec, n int64, mode driver.Mode) (driver.Decision, error) {
	var err error
	if mode == driver.Take {
		err = driver.CheckRequest(key, spec, n)
	} else {
		err = driver.CheckCharge(key, spec, n)
	}
	if err != nil {
		return driver.Decision{}, err
	}
	now := s.micros() // before any lock: the clock is the slowest step
	if err := driver.CheckTime(now); err != nil {
		return driver.Decision{}, fmt.Errorf("memstore: %w", err)
	}
	return s.decideMode(key, spec, now, n, mode), nil
}

// decideMode decides in mode, at now, the input checked.
func (s *Store) decideMode(key string, spec *driver.ValidSpec, now, n int64, mode driver.Mode) driver.Decision {
	if spec.IsAll() {
		return s.decideAll(key, spec, now, n, mode)
	}
	// Here the common case, a key with a state under spec; the others in
	// decide.
	if e := s.load(key); e != nil {
		e.mu.Lock()
		if sl := e.find(spec.StateID()); sl != nil { // a dead entry has no slot
			o := sl.step(spec, now, n, mode)
			e.mu.Unlock()
			return driver.Decision{Outcome: o}
		}
		e.mu.Unlock()
	}
	return s.decide(key, spec, now, n, mode)
}

// decide is Decide for the other cases: a new key, a key new to the
// policy, or an entry that turned out dead.
func (s *Store) decide(key string, spec *driver.ValidSpec, now, n int64, mode driver.Mode) driver.Decision {
	p := spec.StateID()
	for {
		e := s.load(key)
		if e == nil {
			var st driver.State
			o := spec.Step(&st, now, n, mode)
			res := driver.Decision{Outcome: o}
			if !took(mode, o.Allowed, n) {
				return res // a fresh key keeps nothing that it did not take
			}
			e = &entry{key: key}
			e.add(slot{p, now + o.ResetAfter, st})
			if s.insert(e) {
				return res
			}
			continue // the key came in meanwhile: decide on its state
		}
		e.mu.Lock()
		if e.dead() {
			e.mu.Unlock()
			continue // removed meanwhile, and out of keys already
		}
		sl := e.find(p)
		added := sl == nil
		if added {
			sl = &slot{policy: p} // kept if it takes
		}
		o := sl.step(spec, now, n, mode)
		if added && took(mode, o.Allowed, n) {
			e.add(*sl)
		}
		e.mu.Unlock()
		return driver.Decision{Outcome: o}
	}
}

// decideAll decides for every policy of an All at once, under the lock of
// the key's entry, which holds all their states.
func (s *Store) decideAll(key string, spec *driver.ValidSpec, now, n int64, mode driver.Mode) driver.Decision {
	parts := spec.NumParts()
	for {
		e := s.load(key)
		if e == nil {
			var states [driver.MaxParts]driver.State
			var sts [driver.MaxParts]*driver.State
			for i := range parts {
				sts[i] = &states[i]
			}
			res := spec.Decide(sts[:parts], now, n, mode)
			if !took(mode, res.Allowed, n) {
				return res
			}
			e = &entry{key: key}
			for i := range parts {
				e.add(slot{spec.Part(i).StateID(), now + res.Parts[i].ResetAfter, states[i]})
			}
			if s.insert(e) {
				return res
			}
			continue
		}
		e.mu.Lock()
		if e.dead() {
			e.mu.Unlock()
			continue
		}
		res := e.decideAll(spec, now, n, mode)
		e.mu.Unlock()
		return res
	}
}

// Reset forgets key's state under spec.
func (s *Store) Reset(_ context.Context, key string, spec *driver.ValidSpec) error {
	if err := driver.CheckSpec(spec); err != nil {
		return err
	}
	if err := driver.CheckKey(key); err != nil {
		return err
	}
	if s.load(key) == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.load(key)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range spec.Policies() {
		if e.drop(p.StateID()) {
			s.remove(e)
			return nil
		}
	}
	e.exactExpires() // maybe sooner than before
	return nil
}
