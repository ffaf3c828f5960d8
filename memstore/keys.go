package memstore

import (
	"math/rand/v2"
	"slices"
	"time"
)

const (
	// evictionSample is how many keys a full store compares to choose the
	// one to evict.
	evictionSample = 16
	// sweepChunk is how many keys Sweep examines per hold of the store
	// lock, so that new keys are not kept waiting for a whole sweep.
	sweepChunk = 1024
)

// insert adds e, a new entry, unless its key is held already, evicting a
// key if the store is full. It reports whether it added e.
func (s *Store) insert(e *entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keys come and go only under s.mu: the key stays absent until e is
	// in.
	if s.load(e.key) != nil {
		return false
	}
	if len(s.entries) >= s.maxKeys {
		// The time now, not the decision's: the wait for s.mu may have
		// let a sampled key expire, and an expired key is no eviction.
		s.evict(s.micros())
	}
	e.index = len(s.entries)
	e.soonest = e.expires() // e is not shared yet
	s.entries = append(s.entries, e)
	s.keys.Store(e.key, e) // e is complete: deciders may use it at once
	return true
}

// remove takes e out of the store for good. s.mu and e.mu are held.
func (s *Store) remove(e *entry) {
	e.first, e.more = slot{}, nil // dead
	s.keys.Delete(e.key)
	last := len(s.entries) - 1
	moved := s.entries[last]
	s.entries[e.index] = moved
	moved.index = e.index
	s.entries[last] = nil
	s.entries = s.entries[:last]
}

// evict removes, among evictionSample keys sampled at random, the one
// whose states are all full first, or an expired one. s.mu is held.
func (s *Store) evict(now int64) {
	sample := s.entries
	if n := len(s.entries); n > evictionSample {
		var picked [evictionSample]int
		var buf [evictionSample]*entry
		sample = buf[:0]
		for len(sample) < evictionSample {
			if j := rand.IntN(n); !slices.Contains(picked[:len(sample)], j) {
				picked[len(sample)] = j
				sample = append(sample, s.entries[j])
			}
		}
	}
	victim := sample[0] // the soonest lower bound
	for _, e := range sample[1:] {
		if e.soonest < victim.soonest {
			victim = e
		}
	}
	victim.mu.Lock()
	expires := victim.exactExpires()
	// Only a key whose lower bound comes before that can be sooner: few
	// need their lock taken. Holding two entry locks cannot deadlock:
	// evictions take turns under s.mu, decisions never wait for s.mu while
	// they hold an entry's lock, and a key locked by another (a DecideAll
	// may hold several) is in use, so it is skipped rather than waited for.
	for _, e := range sample {
		if expires <= now {
			break // expired: no need to look further
		}
		if e == victim || e.soonest >= expires || !e.mu.TryLock() {
			continue
		}
		if x := e.exactExpires(); x < expires {
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
// time, and of every in-flight slot whose lease ended. The background sweep calls it; call it yourself if you disabled
// that.
func (s *Store) Sweep() {
	s.sweepSlots()
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
			e := s.entries[i]
			if now < e.soonest {
				continue
			}
			e.mu.Lock()
			if now >= e.exactExpires() {
				s.remove(e)
			}
			e.mu.Unlock()
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	if n := len(s.entries); cap(s.entries) > 4*max(n, sweepChunk) {
		s.entries = append(make([]*entry, 0, 2*n), s.entries...) // release the rest
	}
	s.mu.Unlock()
}
