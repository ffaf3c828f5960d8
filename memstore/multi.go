package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/ratekeeper/ratekeeper/driver"
)

// multiAttempts is how many times DecideAll makes room for the new keys
// it would take from before it adds them after deciding (see newKeys).
const multiAttempts = 3

// DecideAll decides reqs together, atomically: if every request is
// allowed, each takes its N; if any is denied, none takes anything, but
// the charges and refunds that requests' Modes ask for (see
// driver.MultiDecider, which says how they count). A request of N 0 only
// looks: it takes nothing, and denies the others only in debt.
// The i-th Decision is request i's own: for a request allowed in a batch
// that another denied, Allowed is true and the Decision reports the state
// as a peek of cost N would, nothing taken. An All spec in a request
// decides as in Decide, its Decision with Parts. Requests are decided in order, and
// a key's state shared by several requests (the same key under the same
// policy) is decided for each in turn: the second sees what the first
// would take. It decides exactly as redisstore's DecideAll over one
// server.
//
// It holds the locks of all the requests' keys at once, taken in the
// order of the keys, and decides on copies of their states, which it
// keeps only as a decision would. Keys it takes from that the store does
// not hold yet are added first, within the store's bound (see
// WithMaxKeys).
//
// An empty or oversized key, a cost outside 0 to the spec's MaxCost or a
// spec not made by driver.Validate fails the whole call, as does more than
// driver.MaxRequests requests or driver.MaxRequestPolicies policies (an
// error matching driver.ErrTooManyRequests). No request returns nil, nil.
func (s *Store) DecideAll(_ context.Context, reqs []driver.Request) ([]driver.Decision, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := driver.CheckRequests(reqs); err != nil {
		return nil, err
	}
	now := s.micros()
	if err := driver.CheckTime(now); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	m := newMulti(reqs)
	for attempt := 1; ; attempt++ {
		if res, ok := m.decide(s, now, attempt == multiAttempts); ok {
			return res, nil
		}
	}
}

// multi is a DecideAll in progress.
type multi struct {
	reqs   []driver.Request
	keys   []string // distinct, sorted: the order of their locks
	parts  []part   // every request's policies, in order
	trials []trial  // the states the parts decide on, one per key and policy
}

// part is one policy of a request.
type part struct {
	spec  *driver.ValidSpec
	n     int64
	trial int // in multi.trials
	// mode is the request's: Take (a peek's too), Charge or Refund; over,
	// its ChargeOver.
	mode driver.Mode
	over bool
}

// trial is a key's state under one policy, copied for the decision.
type trial struct {
	key     int // in multi.keys
	policy  driver.StateID
	state   driver.State
	took    bool
	expires int64 // when it took: when the state is full again
	slot    *slot // the entry's slot, if any
}

func newMulti(reqs []driver.Request) *multi {
	m := &multi{reqs: reqs}
	for _, r := range reqs {
		m.keys = append(m.keys, r.Key)
	}
	slices.Sort(m.keys)
	m.keys = slices.Compact(m.keys)
	for _, r := range reqs {
		k, _ := slices.BinarySearch(m.keys, r.Key)
		mode := r.Act()
		if r.N == 0 {
			mode = driver.Take // a peek in every mode
		}
		for _, p := range r.Spec.Policies() {
			t := slices.IndexFunc(m.trials, func(t trial) bool { return t.key == k && t.policy == p.StateID() })
			if t < 0 {
				t = len(m.trials)
				m.trials = append(m.trials, trial{key: k, policy: p.StateID()})
			}
			m.parts = append(m.parts, part{spec: p, n: r.N, trial: t, mode: mode, over: r.ChargeOver})
		}
	}
	return m
}

// decide makes the decision under the locks of the keys' entries, and
// reports false if it must be made again: an entry died meanwhile, or the
// requests take from keys the store does not hold, which it then adds,
// unless last (see newKeys).
func (m *multi) decide(s *Store, now int64, last bool) ([]driver.Decision, bool) {
	entries := make([]*entry, len(m.keys))
	for i, key := range m.keys {
		if e := s.load(key); e != nil {
			e.mu.Lock()
			entries[i] = e
			if e.dead() {
				unlockAll(entries)
				return nil, false
			}
		}
	}
	m.load(entries, now)
	out, keep := m.run(entries, now)
	var missing []string // keys without an entry, to take from
	for _, t := range m.trials {
		if t.took && entries[t.key] == nil && !slices.Contains(missing, m.keys[t.key]) {
			missing = append(missing, m.keys[t.key])
		}
	}
	if keep && len(missing) > 0 && !last {
		unlockAll(entries)
		s.makeRoom(missing, m, now)
		return nil, false
	}
	if keep {
		m.keep(entries)
	}
	unlockAll(entries)
	if keep && len(missing) > 0 {
		m.newKeys(s, missing)
	}
	return m.results(out), true
}

// load copies the entries' states of the trials, which decide on them.
// The entries' locks are held.
func (m *multi) load(entries []*entry, now int64) {
	for i := range m.trials {
		t := &m.trials[i]
		t.state, t.took, t.expires, t.slot = driver.State{}, false, 0, nil
		if e := entries[t.key]; e != nil {
			if t.slot = e.find(t.policy); t.slot != nil && now < t.slot.expires {
				t.state = t.slot.state.Clone()
			}
		}
	}
}

// run decides every part on the trial states. Without a state shared by
// several parts, it decides them all (charging and refunding, but not
// taking), then, if all allow, takes from each; with one, it decides and
// takes part after part, and if any denies, puts every state back and
// makes the charges and refunds again, in order, each other part
// reporting its decision without its take (all.lua does the same). When
// denied, a Take with ChargeOver charges each of its parts that does not
// fit. A peek (n = 0) takes nothing, so it denies the others only in
// debt. It returns the parts' Outcomes, and whether to keep the trial
// states.
func (m *multi) run(entries []*entry, now int64) (out []driver.Outcome, keep bool) {
	out = make([]driver.Outcome, len(m.parts))
	shared := len(m.trials) < len(m.parts)
	allowed := true
	if !shared {
		for i, p := range m.parts {
			if p.mode == driver.Take {
				out[i] = p.spec.Step(&m.trials[p.trial].state, now, p.n, driver.Check)
			} else {
				out[i] = m.act(p, now, p.mode)
			}
			allowed = allowed && !denies(p, out[i])
		}
		for i, p := range m.parts {
			switch {
			case p.mode != driver.Take || p.n == 0:
			case allowed:
				out[i] = m.act(p, now, driver.Take)
			case p.over && !out[i].Allowed:
				out[i] = m.act(p, now, driver.Charge)
			}
		}
		// A peek may change a state too (a log drops entries that left its
		// window), and the script keeps that.
		return out, true
	}
	peeks := make([]driver.Outcome, len(m.parts))
	for i, p := range m.parts {
		if p.mode != driver.Take {
			out[i] = m.act(p, now, p.mode)
			peeks[i] = out[i]
		} else {
			peeks[i] = p.spec.Step(&m.trials[p.trial].state, now, p.n, driver.Check)
			out[i] = peeks[i]
			if peeks[i].Allowed && p.n > 0 {
				out[i] = m.act(p, now, driver.Take)
			}
		}
		allowed = allowed && !denies(p, peeks[i])
	}
	if allowed {
		return out, true
	}
	m.load(entries, now)
	for i, p := range m.parts {
		switch {
		case p.mode != driver.Take:
			peeks[i] = m.act(p, now, p.mode)
			keep = true
		case p.over && p.n > 0 && !peeks[i].Allowed:
			peeks[i] = m.act(p, now, driver.Charge)
			keep = true
		}
	}
	return peeks, keep
}

// denies reports whether part p, which decided o, denies the others: a
// refund never does, and a peek only while its state is in debt.
func denies(p part, o driver.Outcome) bool {
	switch {
	case p.mode == driver.Refund:
		return false
	case p.n == 0:
		return o.Remaining < 0
	}
	return !o.Allowed
}

// act decides p in mode on its trial state; a take or a charge makes the
// state last longer (see took).
func (m *multi) act(p part, now int64, mode driver.Mode) driver.Outcome {
	t := &m.trials[p.trial]
	o := p.spec.Step(&t.state, now, p.n, mode)
	if took(mode, o.Allowed, p.n) {
		t.took, t.expires = true, max(t.expires, now+o.ResetAfter)
	}
	return o
}

// keep writes the trial states back to the entries. Their locks are held.
func (m *multi) keep(entries []*entry) {
	for i := range m.trials {
		if t := &m.trials[i]; t.slot != nil {
			t.slot.state = t.state
			if t.took {
				t.slot.expires = t.expires
			}
		}
	}
	// Then the new slots, since adding one may move the others.
	for _, t := range m.trials {
		if e := entries[t.key]; e != nil && t.slot == nil && t.took {
			e.add(slot{t.policy, t.expires, t.state})
		}
	}
}

// makeRoom adds an entry for each of keys that has none, so that the
// next attempt finds them all: a slot of a policy it takes from, expired,
// which decides as a fresh key (a sweep frees it if nothing takes).
func (s *Store) makeRoom(keys []string, m *multi, now int64) {
	for _, key := range keys {
		k, _ := slices.BinarySearch(m.keys, key)
		i := slices.IndexFunc(m.trials, func(t trial) bool { return t.key == k && t.took })
		e := &entry{key: key}
		e.add(slot{policy: m.trials[i].policy, expires: now})
		s.insert(e) // or the key came in meanwhile
	}
}

// newKeys adds the keys that took and had no entry, once the other keys'
// locks are released: after multiAttempts, a store too small for all the
// keys (see WithMaxKeys) evicts some of them as they come in. A key that
// came in meanwhile keeps its own state under a policy it already has.
func (m *multi) newKeys(s *Store, keys []string) {
	for _, key := range keys {
		k, _ := slices.BinarySearch(m.keys, key)
		var slots []slot
		for _, t := range m.trials {
			if t.key == k && t.took {
				slots = append(slots, slot{t.policy, t.expires, t.state})
			}
		}
		e := &entry{key: key}
		for _, sl := range slots {
			e.add(sl)
		}
		if s.insert(e) {
			continue
		}
		if cur := s.load(key); cur != nil {
			cur.mu.Lock()
			if !cur.dead() {
				for _, sl := range slots {
					if cur.find(sl.policy) == nil {
						cur.add(sl)
					}
				}
			}
			cur.mu.Unlock()
		}
	}
}

// results builds each request's Decision from its parts' Outcomes.
func (m *multi) results(out []driver.Outcome) []driver.Decision {
	res := make([]driver.Decision, len(m.reqs))
	for i, r := range m.reqs {
		res[i] = r.Spec.Decision(out)
		out = out[max(r.Spec.NumParts(), 1):]
	}
	return res
}

// unlockAll releases the locks of the entries held.
func unlockAll(entries []*entry) {
	for _, e := range entries {
		if e != nil {
			e.mu.Unlock()
		}
	}
}
