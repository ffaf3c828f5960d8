// Package memstore is an in-process ratekeeper.Store, for a single
// instance or for tests. It runs the same Go models that the Lua scripts
// of redisstore are tested against, so both stores decide alike.
//
// Keys live in sharded maps, each shard under its own lock. A key expires
// once its state is full again (nothing is lost: a fresh key decides the
// same), and a background sweep frees the memory of expired keys. The
// number of keys is bounded (see WithMaxKeys).
package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Defaults for the options.
const (
	DefaultMaxKeys       = 1 << 20
	DefaultSweepInterval = time.Minute
)

const (
	maxShards = 64
	// evictionSample is how many keys a full shard compares to choose the
	// one to evict.
	evictionSample = 16
)

// Store is an in-process ratekeeper.Store. It is safe for concurrent use.
// Call Close to stop its background sweep.
type Store struct {
	seed          maphash.Seed
	shards        []shard
	maxKeys       int
	perShard      int
	now           func() time.Time // nil: the monotonic clock, from epoch
	epoch         time.Time
	sweepInterval time.Duration
	evictions     atomic.Int64
	validated     [8]atomic.Pointer[ratekeeper.SpecKey] // recently validated Specs
	nextValid     atomic.Uint32
	stop          chan struct{}
	stopOnce      sync.Once
	done          chan struct{}
}

var _ ratekeeper.Store = (*Store)(nil)

type shard struct {
	mu      sync.Mutex
	entries map[string]*entry // by key: the first of the key's states
	n       int               // entries, chained ones included
	_       [40]byte          // keep shards on separate cache lines
}

// entry is one key's state under one policy: its algorithm and its name,
// unless that is the algorithm's own (so that limiters of one policy share
// it). A key limited by several policies chains their entries, which
// keeps the map keyed by the caller's key alone: one string to hash.
type entry struct {
	algorithm, name string
	state           ratekeeper.State
	expires         int64 // microseconds; the state is full again from then on
	next            *entry
}

// find returns key's entry for spec's policy, or nil.
func (sh *shard) find(key string, spec *ratekeeper.Spec) *entry {
	name := spec.StateName()
	for e := sh.entries[key]; e != nil; e = e.next {
		if e.algorithm == spec.Algorithm && e.name == name {
			return e
		}
	}
	return nil
}

// add inserts a new entry for spec's policy of key. sh.mu is held.
func (s *Store) add(sh *shard, key string, spec *ratekeeper.Spec, st ratekeeper.State, now, expires int64) {
	s.makeRoom(sh, now)
	sh.entries[key] = &entry{algorithm: spec.Algorithm, name: spec.StateName(), state: st, expires: expires, next: sh.entries[key]}
	sh.n++
}

// remove unlinks e from key's chain. sh.mu is held.
func (sh *shard) remove(key string, e *entry) {
	first := sh.entries[key]
	if first == e {
		if e.next == nil {
			delete(sh.entries, key)
		} else {
			sh.entries[key] = e.next
		}
		sh.n--
		return
	}
	for p := first; p != nil; p = p.next {
		if p.next == e {
			p.next = e.next
			sh.n--
			return
		}
	}
}

// Option configures a Store.
type Option func(*Store)

// WithMaxKeys bounds the number of keys the store holds (default
// DefaultMaxKeys). Keys are spread over shards, and each shard holds at
// most its share, rounded up. When a new key finds its shard full, the
// store evicts, among a sample of 16 keys of that shard, the one whose
// state would expire first (an expired one, if any): the key that carries
// the least information. An evicted key starts again full. Memory stays
// bounded under any number of distinct keys; Evictions counts them.
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
// monotonic clock, for deterministic tests.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		seed:          maphash.MakeSeed(),
		maxKeys:       DefaultMaxKeys,
		epoch:         time.Now(),
		sweepInterval: DefaultSweepInterval,
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	for _, opt := range opts {
		opt(s)
	}
	n := maxShards
	for n > 1 && s.maxKeys/n < evictionSample {
		n /= 2 // small bounds: fewer, fuller shards keep the bound tight
	}
	s.shards = make([]shard, n)
	for i := range s.shards {
		s.shards[i].entries = make(map[string]*entry)
	}
	s.perShard = (s.maxKeys + n - 1) / n
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

// MaxKeys returns the bound on the number of keys: the per-shard bound
// times the number of shards, which is WithMaxKeys rounded up.
func (s *Store) MaxKeys() int { return s.perShard * len(s.shards) }

// Len returns the number of states held (one per key and policy), expired
// ones included until swept.
func (s *Store) Len() int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.n
		sh.mu.Unlock()
	}
	return total
}

// micros is the time in microseconds since the Unix epoch. By default it
// reads only the monotonic clock (time.Since), which costs half of
// time.Now and never jumps.
func (s *Store) micros() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.epoch.UnixMicro() + int64(time.Since(s.epoch)/time.Microsecond)
}

// Evictions returns how many keys were evicted because their shard was
// full.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// Decide runs spec's model for key under the key's shard lock.
func (s *Store) Decide(_ context.Context, key string, spec ratekeeper.Spec, n int64) (ratekeeper.Result, error) {
	if err := s.validate(&spec); err != nil {
		return ratekeeper.Result{}, err
	}
	now := s.micros()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if spec.Algorithm == ratekeeper.AlgorithmAll {
		return s.decideAll(sh, key, &spec, now, n), nil
	}
	e := sh.find(key, &spec)
	if e == nil {
		var st ratekeeper.State
		res := spec.Step(&st, now, n)
		if res.Allowed && n > 0 {
			s.add(sh, key, &spec, st, now, now+res.ResetAfter.Microseconds())
		}
		return res, nil
	}
	if now >= e.expires {
		e.state = ratekeeper.State{} // full again: the same as a fresh key
	}
	res := spec.Step(&e.state, now, n)
	if res.Allowed && n > 0 {
		e.expires = now + res.ResetAfter.Microseconds()
	}
	return res, nil
}

// decideAll decides for every policy of an All at once, each in its own
// entry, under the key's shard lock (all the entries of a key share its
// shard).
func (s *Store) decideAll(sh *shard, key string, spec *ratekeeper.Spec, now, n int64) ratekeeper.Result {
	var states [ratekeeper.MaxParts]ratekeeper.State
	var entries [ratekeeper.MaxParts]*entry
	var sts [ratekeeper.MaxParts]*ratekeeper.State
	for i := range spec.Parts {
		if e := sh.find(key, &spec.Parts[i]); e != nil {
			entries[i] = e
			if now < e.expires {
				states[i] = e.state
			}
		}
		sts[i] = &states[i]
	}
	res := spec.StepAll(sts[:len(spec.Parts)], now, n)
	if !res.Allowed || n == 0 {
		return res
	}
	for i := range spec.Parts {
		expires := now + res.Parts[i].ResetAfter.Microseconds()
		if e := entries[i]; e != nil {
			e.state, e.expires = states[i], expires
		}
	}
	// Then the policies that the key had no state for.
	for i := range spec.Parts {
		if entries[i] == nil {
			s.add(sh, key, &spec.Parts[i], states[i], now, now+res.Parts[i].ResetAfter.Microseconds())
		}
	}
	return res
}

// validate checks a Spec before its model runs. It remembers the last few
// Specs it validated, for the Limiters sharing this store.
func (s *Store) validate(spec *ratekeeper.Spec) error {
	key := spec.Key()
	for i := range s.validated {
		if v := s.validated[i].Load(); v != nil && *v == key {
			return nil
		}
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	valid := key
	s.validated[s.nextValid.Add(1)%uint32(len(s.validated))].Store(&valid)
	return nil
}

// Reset forgets key's state under spec.
func (s *Store) Reset(_ context.Context, key string, spec ratekeeper.Spec) error {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	parts := spec.Parts
	if spec.Algorithm != ratekeeper.AlgorithmAll {
		parts = []ratekeeper.Spec{spec}
	}
	for i := range parts {
		if e := sh.find(key, &parts[i]); e != nil {
			sh.remove(key, e)
		}
	}
	return nil
}

func (s *Store) shard(key string) *shard {
	if len(s.shards) == 1 {
		return &s.shards[0]
	}
	return &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
}

// makeRoom evicts one state if sh is full. sh.mu is held.
func (s *Store) makeRoom(sh *shard, now int64) {
	if sh.n < s.perShard {
		return
	}
	var victimKey string
	var victim *entry
	seen := 0
sample:
	for k, first := range sh.entries { // map order is random: a fair sample
		for e := first; e != nil; e = e.next {
			if victim == nil || e.expires < victim.expires {
				victimKey, victim = k, e
			}
			if seen++; seen == evictionSample || victim.expires <= now {
				break sample
			}
		}
	}
	sh.remove(victimKey, victim)
	if victim.expires > now {
		s.evictions.Add(1)
	}
}

func (s *Store) sweepLoop() {
	defer close(s.done)
	ticker := time.NewTicker(s.sweepInterval)
	defer ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ticker.C:
			s.Sweep()
		}
	}
}

// Sweep frees the memory of every expired key now, one shard at a time.
// The background sweep calls it; call it yourself if you disabled that.
func (s *Store) Sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.micros()
		for k, first := range sh.entries {
			for e := first; e != nil; e = e.next {
				if now >= e.expires {
					sh.remove(k, e)
				}
			}
		}
		sh.mu.Unlock()
	}
}
