package memstore

import (
	"slices"
	"sync"

	"github.com/ratekeeper/ratekeeper/driver"
)

// entry is one key: the states of the policies it is used under. An entry
// removed from the store is dead, and never used again: a decision that
// finds it dead looks the key up anew, so that no two entries of one key
// are ever updated.
type entry struct {
	mu    sync.Mutex
	key   string
	first slot    // the zero slot once dead; guarded by mu
	more  *[]slot // the other slots, if any; guarded by mu
	index int     // in Store.entries; guarded by Store.mu
	// soonest is a lower bound of expires(), guarded by Store.mu, so that
	// eviction and the sweep need not take every key's lock: decisions,
	// which take no store lock, only ever postpone a key's expiry.
	soonest int64
}

// slot is a key's state under one policy.
type slot struct {
	policy  driver.StateID
	expires int64 // microseconds; the state is full again from then on
	state   driver.State
}

// step runs spec's model in mode on the slot's state at now, and moves the
// expiry when the request took. It returns the model's Outcome. A state
// past its expiry is kept as it is, not cleared: the model decides on it
// as on a fresh key's (as the scripts do on a key Redis has not expired
// yet), and a clock that then steps back still finds what was taken
// before it.
func (sl *slot) step(spec *driver.ValidSpec, now, n int64, mode driver.Mode) driver.Outcome {
	o := spec.Step(&sl.state, now, n, mode)
	if took(mode, o.Allowed, n) {
		sl.expires = now + o.ResetAfter
	}
	return o
}

// took reports whether a decision in mode took from its state, which then
// lasts longer. A refund only brings the state's expiry closer: keeping
// the later one changes no decision, and keeps Store's lower bounds of
// expiries true.
func took(mode driver.Mode, allowed bool, n int64) bool {
	return n > 0 && (mode == driver.Charge || mode == driver.Take && allowed)
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
	if e.dead() {
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

// exactExpires makes e.soonest exact, and returns it. Store.mu and e.mu
// are held.
func (e *entry) exactExpires() int64 {
	e.soonest = e.expires()
	return e.soonest
}

// decideAll runs an All's model in mode on e's slots of its parts. e.mu
// is held.
func (e *entry) decideAll(spec *driver.ValidSpec, now, n int64, mode driver.Mode) driver.Decision {
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
		slots[i], sts[i] = sl, &sl.state // past its expiry too, as step says
	}
	res := spec.Decide(sts[:parts], now, n, mode)
	if !took(mode, res.Allowed, n) {
		return res
	}
	for i := range parts {
		if sl := slots[i]; sl != nil {
			sl.expires = now + res.Parts[i].ResetAfter
		}
	}
	// Then the new slots, since adding one may move the others.
	for i := range parts {
		if slots[i] == nil {
			e.add(slot{spec.Part(i).StateID(), now + res.Parts[i].ResetAfter, fresh[i]})
		}
	}
	return res
}
