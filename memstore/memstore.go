// Package memstore is an in-process ratekeeper.Store, for a single
// instance or for tests. It runs the same Go models that the Lua scripts
// of redisstore are tested against, so both stores decide alike.
//
// Keys live in a hash table that decisions read without locking. Each key
// has its own lock, over the states of every policy it is used under: a
// decision on a key that exists takes no lock but that key's, and an All
// decides for all its policies at once under it. A key expires once all
// its states are full again (nothing is lost: a fresh key decides the
// same), and a background sweep frees the memory of expired keys. The
// number of keys is bounded (see WithMaxKeys).
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/results"
)

// Defaults for the options.
const (
	DefaultMaxKeys       = 1 << 20
	DefaultSweepInterval = time.Minute
)

const (
	// evictionSample is how many keys a full store compares to choose the
	// one to evict.
	evictionSample = 16
	// sweepChunk is how many keys Sweep examines per hold of the store
	// lock, so that new keys are not kept waiting for a whole sweep.
	sweepChunk = 1024
	// tableBits is log2 of the number of tables the keys are spread over,
	// so that growing one copies only a small part of the keys.
	tableBits = 6
	// minBuckets is the size of an empty table.
	minBuckets = 8
)

// Store is an in-process ratekeeper.Store. It is safe for concurrent use.
// Call Close to stop its background sweep.
type Store struct {
	// Read by every decision, and written rarely.
	seed        maphash.Seed
	tables      [1 << tableBits]atomic.Pointer[table] // by the top bits of a key's hash
	now         func() time.Time                      // nil: the monotonic clock, from epoch
	epoch       time.Time
	epochMicros int64

	_ [64]byte // keep the fields above apart from those that new keys write

	// mu guards the contents of the tables, and entries: only insertions
	// and removals of keys take it, never a decision on a key that exists.
	mu            sync.Mutex
	entries       []held // every entry in the tables, densely, for sampling
	maxKeys       int
	evictions     atomic.Int64
	sweepInterval time.Duration
	stop          chan struct{}
	stopOnce      sync.Once
	done          chan struct{}
}

var _ ratekeeper.Store = (*Store)(nil)

// held is an entry in Store.entries.
type held struct {
	e *entry
	// expires is when all the states of e are full again, as last
	// computed. Decisions, which only postpone that time, leave it be, as
	// they take no store lock: it is a lower bound, made exact (under
	// e.mu) wherever eviction or the sweep find it low enough to matter.
	expires int64
}

// entry is one key: the states of the policies it is used under. An entry
// removed from the store is dead, and never used again: a decision that
// finds it dead looks the key up anew, so that no two entries of one key
// are ever updated.
//
// A decision for a key under one policy reads and writes only the first
// 64 bytes, one cache line (entries take 128 bytes, a size class whose
// objects start a line), unless its model keeps more than two words of
// state: the lock, the key, and the first slot's policy, expiry and the
// head of its state. Goroutines deciding for one key pass just that line
// between them.
type entry struct {
	mu    sync.Mutex
	key   string
	first slot    // the zero slot once dead; guarded by mu
	index int     // in Store.entries; guarded by Store.mu
	more  *[]slot // the other slots, if any; guarded by mu
}

// slot is a key's state under one policy.
type slot struct {
	policy  driver.StateID
	expires int64 // microseconds; the state is full again from then on
	state   driver.State
}

// step runs spec's model on the slot's state at now, a state past its
// expiry being full again (the same as a fresh key's), and moves the
// expiry when the request took. It returns the decision in the spec's
// units, for the caller to build the Result once it released the key's
// lock.
func (sl *slot) step(spec *driver.ValidSpec, now, n int64) driver.Outcome {
	if now >= sl.expires {
		sl.state = driver.State{}
	}
	o := spec.StepOne(&sl.state, now, n)
	if o.Allowed && n > 0 {
		sl.expires = now + o.ResetAfter
	}
	return o
}

// dead reports whether e was removed from the store. e.mu is held.
func (e *entry) dead() bool { return e.first.policy == driver.StateID{} }

// find returns the slot of the policy, or nil. e.mu is held.
func (e *entry) find(p driver.StateID) *slot {
	if e.first.policy == p {
		return &e.first
	}
	if e.more != nil {
		for i := range *e.more {
			if sl := &(*e.more)[i]; sl.policy == p {
				return sl
			}
		}
	}
	return nil
}

// add adds a slot to a live entry, or the first one to a new entry.
// e.mu is held.
func (e *entry) add(sl slot) {
	if e.first.policy == (driver.StateID{}) {
		e.first = sl
		return
	}
	if e.more == nil {
		e.more = new([]slot)
	}
	*e.more = append(*e.more, sl)
}

// drop removes the slot of the policy, if any, and reports whether e has
// no slot left. e.mu is held.
func (e *entry) drop(p driver.StateID) (empty bool) {
	if e.more == nil {
		if e.first.policy == p {
			e.first = slot{}
		}
		return e.dead()
	}
	more := *e.more
	last := len(more) - 1
	if e.first.policy == p {
		e.first = more[last]
	} else if i := slices.IndexFunc(more, func(sl slot) bool { return sl.policy == p }); i >= 0 {
		more[i] = more[last]
	} else {
		return false
	}
	more[last] = slot{}
	if last == 0 {
		e.more = nil
	} else {
		*e.more = more[:last]
	}
	return false
}

// expires returns when every state of e is full again. e.mu is held.
func (e *entry) expires() int64 {
	latest := e.first.expires
	if e.more != nil {
		for i := range *e.more {
			latest = max(latest, (*e.more)[i].expires)
		}
	}
	return latest
}

// exactExpires makes the lower bound of e's expiry exact, and returns it.
// s.mu and e.mu are held.
func (s *Store) exactExpires(e *entry) int64 {
	x := e.expires()
	s.entries[e.index].expires = x
	return x
}

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
		seed:          maphash.MakeSeed(),
		maxKeys:       DefaultMaxKeys,
		epoch:         time.Now(),
		sweepInterval: DefaultSweepInterval,
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	s.epochMicros = s.epoch.UnixMicro()
	for i := range s.tables {
		s.tables[i].Store(newTable(0))
	}
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

// micros is the time in microseconds since the Unix epoch. By default it
// reads only the monotonic clock (time.Since), which costs half of
// time.Now and never jumps.
func (s *Store) micros() int64 {
	if s.now != nil {
		return s.now().UnixMicro()
	}
	return s.epochMicros + int64(time.Since(s.epoch)/time.Microsecond)
}

// Evictions returns how many keys were evicted, before they expired,
// because the store was full.
func (s *Store) Evictions() int64 { return s.evictions.Load() }

// Decide runs spec's model for key under the key's lock. A cost outside 0
// to spec.MaxCost, which a Limiter never passes on, is an error wrapping
// ratekeeper.ErrInvalidCost.
func (s *Store) Decide(_ context.Context, key string, spec *driver.ValidSpec, n int64) (ratekeeper.Result, error) {
	if !spec.Valid() {
		return ratekeeper.Result{}, fmt.Errorf("%w: memstore: a spec not made by driver.Validate", ratekeeper.ErrInvalidPolicy)
	}
	if n < 0 || n > spec.MaxCost() {
		// The models assume this range: out of it they may panic, or
		// admit more than the limit.
		return ratekeeper.Result{}, fmt.Errorf("%w: memstore: cost %d is outside 0 to %d", ratekeeper.ErrInvalidCost, n, spec.MaxCost())
	}
	now := s.micros() // before any lock: the clock is the slowest step
	if err := driver.CheckTime(now); err != nil {
		return ratekeeper.Result{}, fmt.Errorf("memstore: %w", err)
	}
	h := s.hash(key)
	if spec.IsAll() {
		return s.decideAll(key, h, spec, now, n), nil
	}
	// Here the common case, a key with a state under spec; the others in
	// decide.
	if e := s.lookup(key, h, false); e != nil {
		// The lock first, then the key: they share a cache line, which
		// another goroutine deciding for the key may hold. A dead entry
		// has no slot.
		e.mu.Lock()
		if sl := e.find(spec.StateID()); sl != nil && e.key == key {
			o := sl.step(spec, now, n)
			e.mu.Unlock()
			return results.Of(spec, o), nil
		}
		e.mu.Unlock()
	}
	return s.decide(key, h, spec, now, n), nil
}

// decide is Decide for the other cases: a new key, a key new to the
// policy, or an entry that turned out dead or another key's.
func (s *Store) decide(key string, h uint64, spec *driver.ValidSpec, now, n int64) ratekeeper.Result {
	p := spec.StateID()
	for exact := false; ; {
		e := s.lookup(key, h, exact)
		if e == nil {
			var st driver.State
			o := spec.StepOne(&st, now, n)
			res := results.Of(spec, o)
			if !o.Allowed || n == 0 {
				return res // a fresh key keeps nothing that it did not take
			}
			e = &entry{key: key}
			e.add(slot{p, now + o.ResetAfter, st})
			if s.insert(e, h) {
				return res
			}
			continue // the key came in meanwhile: decide on its state
		}
		e.mu.Lock()
		if e.key != key || e.dead() {
			exact = exact || !e.dead() // a bucket reused, or a full hash collision
			e.mu.Unlock()
			continue
		}
		sl := e.find(p)
		added := sl == nil
		if added {
			sl = &slot{policy: p} // kept if it takes
		}
		o := sl.step(spec, now, n)
		if added && o.Allowed && n > 0 {
			e.add(*sl)
		}
		e.mu.Unlock()
		return results.Of(spec, o)
	}
}

// decideAll decides for every policy of an All at once, under the lock of
// the key's entry, which holds all their states.
func (s *Store) decideAll(key string, h uint64, spec *driver.ValidSpec, now, n int64) ratekeeper.Result {
	exact := false
	for {
		e := s.lookup(key, h, exact)
		if e == nil {
			var states [driver.MaxParts]driver.State
			var sts [driver.MaxParts]*driver.State
			for i := range spec.NumParts() {
				sts[i] = &states[i]
			}
			var out [driver.MaxParts]driver.Outcome
			spec.StepAll(sts[:spec.NumParts()], now, n, out[:])
			res := results.Join(spec, out[:spec.NumParts()])
			if !res.Allowed || n == 0 {
				return res
			}
			e = &entry{key: key}
			for i := range spec.NumParts() {
				e.add(slot{spec.Part(i).StateID(), now + out[i].ResetAfter, states[i]})
			}
			if s.insert(e, h) {
				return res
			}
			continue
		}
		e.mu.Lock()
		if e.key != key || e.dead() {
			exact = exact || !e.dead()
			e.mu.Unlock()
			continue
		}
		res := e.decideAll(spec, now, n)
		e.mu.Unlock()
		return res
	}
}

// decideAll runs an All's model on e's slots of its parts. e.mu is held.
func (e *entry) decideAll(spec *driver.ValidSpec, now, n int64) ratekeeper.Result {
	var fresh [driver.MaxParts]driver.State // for the parts e has no slot for
	var sts [driver.MaxParts]*driver.State
	var slots [driver.MaxParts]*slot
	parts := spec.NumParts()
	for i := range parts {
		sl := e.find(spec.Part(i).StateID())
		if sl == nil {
			sts[i] = &fresh[i]
			continue
		}
		if now >= sl.expires {
			sl.state = driver.State{}
		}
		slots[i], sts[i] = sl, &sl.state
	}
	var out [driver.MaxParts]driver.Outcome
	spec.StepAll(sts[:parts], now, n, out[:])
	res := results.Join(spec, out[:parts])
	if !res.Allowed || n == 0 {
		return res
	}
	for i := range parts {
		if sl := slots[i]; sl != nil {
			sl.expires = now + out[i].ResetAfter
		}
	}
	// Then the new slots, since adding one may move the others.
	for i := range parts {
		if slots[i] == nil {
			e.add(slot{spec.Part(i).StateID(), now + out[i].ResetAfter, fresh[i]})
		}
	}
	return res
}

// insert adds e, a new entry for a key of hash h, unless the key is held
// already, evicting a key if the store is full. It reports whether it
// added e.
func (s *Store) insert(e *entry, h uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keys come and go only under s.mu: the key stays absent until e is
	// in.
	if s.lookup(e.key, h, true) != nil {
		return false
	}
	if len(s.entries) >= s.maxKeys {
		// The time now, not the decision's: the wait for s.mu may have
		// let a sampled key expire, and an expired key is no eviction.
		s.evict(s.micros())
	}
	e.index = len(s.entries)
	s.entries = append(s.entries, held{e, e.expires()})
	t := s.tables[h>>(64-tableBits)].Load()
	if (t.used+1)*4 > len(t.buckets)*3 {
		t = t.resize(t.live + 1)
		s.tables[h>>(64-tableBits)].Store(t)
	}
	t.put(h, e) // e is complete: deciders may use it at once
	return true
}

// remove takes e out of the store for good. s.mu and e.mu are held.
func (s *Store) remove(e *entry) {
	e.first, e.more = slot{}, nil // dead
	h := s.hash(e.key)
	t := s.tables[h>>(64-tableBits)].Load()
	t.delete(h, e)
	if t.live*8 < len(t.buckets) && len(t.buckets) > minBuckets {
		s.tables[h>>(64-tableBits)].Store(t.resize(t.live))
	}
	last := len(s.entries) - 1
	moved := s.entries[last]
	s.entries[e.index] = moved
	moved.e.index = e.index
	s.entries[last] = held{}
	s.entries = s.entries[:last]
}

// evict removes, among evictionSample keys sampled at random, the one
// whose states are all full first, or an expired one. s.mu is held.
func (s *Store) evict(now int64) {
	var sample [evictionSample]held
	k := 0
	if n := len(s.entries); n <= evictionSample {
		k = copy(sample[:], s.entries)
	} else {
		var picked [evictionSample]int
		for k < evictionSample {
			if j := rand.IntN(n); !slices.Contains(picked[:k], j) {
				picked[k], sample[k] = j, s.entries[j]
				k++
			}
		}
	}
	first := 0 // the soonest lower bound
	for i := 1; i < k; i++ {
		if sample[i].expires < sample[first].expires {
			first = i
		}
	}
	victim := sample[first].e
	victim.mu.Lock()
	expires := s.exactExpires(victim)
	// Only a key whose lower bound comes before that can be sooner: few
	// need their lock taken. Holding two entry locks cannot deadlock:
	// evictions take turns under s.mu, and decisions hold only one.
	for i := 0; i < k && expires > now; i++ {
		if i == first || sample[i].expires >= expires {
			continue
		}
		e := sample[i].e
		e.mu.Lock()
		if x := s.exactExpires(e); x < expires {
			victim.mu.Unlock()
			victim, expires = e, x
			continue
		}
		e.mu.Unlock()
	}
	if expires > now {
		s.evictions.Add(1)
	}
	s.remove(victim)
	victim.mu.Unlock()
}

// Reset forgets key's state under spec.
func (s *Store) Reset(_ context.Context, key string, spec *driver.ValidSpec) error {
	if !spec.Valid() {
		return fmt.Errorf("%w: memstore: a spec not made by driver.Validate", ratekeeper.ErrInvalidPolicy)
	}
	h := s.hash(key)
	if s.lookup(key, h, true) == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(key, h, true)
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
	s.exactExpires(e) // maybe sooner than before
	return nil
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

// Sweep frees the memory of every expired key now, a chunk of keys at a
// time. The background sweep calls it; call it yourself if you disabled
// that.
func (s *Store) Sweep() {
	s.mu.Lock()
	i := len(s.entries)
	s.mu.Unlock()
	for i > 0 {
		s.mu.Lock()
		// A removal moves the last entry into the gap: the entries below
		// i, not yet examined, stay below it.
		i = min(i, len(s.entries))
		now := s.micros()
		for end := max(i-sweepChunk, 0); i > end; {
			i--
			if now < s.entries[i].expires {
				continue
			}
			e := s.entries[i].e
			e.mu.Lock()
			if now >= s.exactExpires(e) {
				s.remove(e)
			}
			e.mu.Unlock()
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	if n := len(s.entries); cap(s.entries) > 4*max(n, sweepChunk) {
		s.entries = append(make([]held, 0, 2*n), s.entries...) // release the rest
	}
	s.mu.Unlock()
}

// table is an open-addressing hash table of entries, probed linearly.
// Decisions read it without a lock; insertions and removals hold
// Store.mu, and replace the table with a resized copy, half full, when
// three quarters of its buckets are used or less than an eighth live. A
// removed entry leaves a tombstone, so that probes for the keys past it
// go on; resizing drops the tombstones. Its size is not rounded up to a
// power of two: at 16 bytes a bucket, a smaller table misses the cache
// less often.
type table struct {
	buckets []bucket // never all used
	// Every insertion and removal writes the counts: they keep off the
	// cache line of buckets, which every lookup reads.
	_    [64 - 24]byte
	used int // buckets with a hash: live and tombstones
	live int
	_    [64 - 16]byte
}

type bucket struct {
	hash  atomic.Uint64 // 0: never used
	entry atomic.Pointer[entry]
}

// newTable returns an empty table with room for live entries.
func newTable(live int) *table {
	return &table{buckets: make([]bucket, max(minBuckets, 2*live))}
}

// start returns the bucket where probes for hash h start: the low 32 bits
// of h scaled to the table (the top bits chose the table).
func (t *table) start(h uint64) int {
	return int(uint64(uint32(h)) * uint64(len(t.buckets)) >> 32)
}

// hash returns key's hash, which is never 0.
func (s *Store) hash(key string) uint64 {
	if h := maphash.String(s.seed, key); h != 0 {
		return h
	}
	return 1
}

// lookup returns the entry of key, of hash h, or nil. Unless exact, it
// returns the first entry of hash h, of key almost always, but the caller
// must check. The entry may be dead by the time its lock is taken.
func (s *Store) lookup(key string, h uint64, exact bool) *entry {
	t := s.tables[h>>(64-tableBits)].Load()
	for i := t.start(h); ; i++ {
		if i == len(t.buckets) {
			i = 0
		}
		b := &t.buckets[i]
		switch b.hash.Load() {
		case 0:
			return nil
		case h:
			// A bucket reused for another key changes its entry after its
			// hash: only the key tells.
			if e := b.entry.Load(); e != nil && (!exact || e.key == key) {
				return e
			}
		}
	}
}

// put adds e, of hash h, whose key t lacks. Store.mu is held.
func (t *table) put(h uint64, e *entry) {
	for i := t.start(h); ; i++ {
		if i == len(t.buckets) {
			i = 0
		}
		b := &t.buckets[i]
		if b.hash.Load() == 0 {
			t.used++
		} else if b.entry.Load() != nil {
			continue
		}
		b.hash.Store(h)
		b.entry.Store(e)
		t.live++
		return
	}
}

// delete leaves a tombstone in e's bucket. Store.mu is held.
func (t *table) delete(h uint64, e *entry) {
	for i := t.start(h); ; i++ {
		if i == len(t.buckets) {
			i = 0
		}
		if b := &t.buckets[i]; b.entry.Load() == e {
			b.entry.Store(nil)
			t.live--
			return
		}
	}
}

// resize returns a copy of t, without tombstones, sized for live entries.
// Store.mu is held.
func (t *table) resize(live int) *table {
	nt := newTable(live)
	for i := range t.buckets {
		b := &t.buckets[i]
		if e := b.entry.Load(); e != nil {
			nt.put(b.hash.Load(), e)
		}
	}
	return nt
}
