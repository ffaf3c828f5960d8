package ratekeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Concurrency is an in-flight limit: at most Limit holders per key at
// once, across every process sharing the store, such as "at most 20
// requests in progress per customer" or "at most 4 exports running per
// tenant". A rate limit cannot say this, and a process-local semaphore
// does not hold across servers. NewConcurrency makes a Semaphore of it.
type Concurrency struct {
	// Limit is the most slots held at once per key: 1 to MaxSlots.
	Limit int64
	// TTL is how long a slot outlives a holder that stopped renewing it
	// (a process that crashed, or lost the store): MinSlotTTL to
	// MaxSlotTTL, DefaultConcurrencyTTL if zero. A Semaphore renews the
	// slots it holds every TTL/3, so a live holder keeps its slot however
	// long it holds it.
	TTL time.Duration
	// Name keeps the slots of different limits on one key apart, as a
	// policy's name does; "concurrency" if empty. Semaphores that share
	// a key's slots share a Name, and should share a TTL too.
	Name string
}

// slotPoll is the longest a waiter at the head of its key's queue waits
// before asking the store again: slots released by other processes are
// not announced, so it polls.
const slotPoll = 50 * time.Millisecond

// A Semaphore limits how many holders of a key run at once, across every
// process that shares its Store (see Concurrency). Each slot is a lease
// in the store that expires TTL after it was last renewed; a Semaphore
// renews the slots it holds in the background until they are released,
// so a slot comes back TTL after its holder crashed, and never sooner.
//
//	sem, err := ratekeeper.NewConcurrency(store, ratekeeper.Concurrency{Limit: 20, TTL: 30 * time.Second})
//	release, err := sem.Acquire(ctx, "customer:42") // waits for a slot, until ctx ends
//	if err != nil { ... }
//	defer release()
//
// Waiting is first come, first served among the callers of one
// Semaphore: only the longest waiter of a key asks the store, and the
// slot a holder of this Semaphore releases goes to it at once. Across
// Semaphores (other processes), there is no queue: each one's longest
// waiter asks the store when it learns of a release of its own, when the
// first lease held would end, and else every 50 ms, and the first to ask
// after a slot is freed takes it. A waiter in one process can so be
// overtaken by a later one in another, but never by a later one in its
// own. A Semaphore is safe for concurrent use.
type Semaphore struct {
	slots driver.Slots
	spec  driver.SlotSpec
	ttl   time.Duration

	mu     sync.Mutex
	queues map[string]*slotQueue // keys with waiters or local holders
}

// slotQueue is one key's waiters, first come first, and the signal of a
// slot released here.
type slotQueue struct {
	waiters []chan struct{} // each closed when its waiter is first
	freed   chan struct{}   // buffered: a slot of the key was released here
	users   int             // waiters and holders, to drop an idle queue
}

// NewConcurrency returns a Semaphore that keeps c's in-flight limit in
// store, which must be a driver.Slots (memstore and redisstore are);
// else it fails with ErrNoSlotStore. A Concurrency out of range is an
// error wrapping ErrInvalidPolicy. It never contacts the store.
func NewConcurrency(store Store, c Concurrency) (*Semaphore, error) {
	if store == nil {
		return nil, errors.New("ratekeeper: nil Store")
	}
	slots, ok := store.(driver.Slots)
	if !ok {
		return nil, ErrNoSlotStore
	}
	if c.TTL == 0 {
		c.TTL = DefaultConcurrencyTTL
	}
	if c.Name == "" {
		c.Name = "concurrency"
	}
	if c.TTL < MinSlotTTL || c.TTL > MaxSlotTTL || c.TTL%time.Microsecond != 0 {
		return nil, fmt.Errorf("%w: Concurrency TTL %v, want whole microseconds in [%v, %v]", ErrInvalidPolicy, c.TTL, MinSlotTTL, MaxSlotTTL)
	}
	spec := driver.SlotSpec{Name: c.Name, Limit: c.Limit, TTL: int64(c.TTL / time.Microsecond)}
	if err := driver.CheckSlotSpec(spec); err != nil {
		return nil, err
	}
	return &Semaphore{slots: slots, spec: spec, ttl: c.TTL, queues: map[string]*slotQueue{}}, nil
}

// Limit returns the most slots held at once per key.
func (s *Semaphore) Limit() int64 { return s.spec.Limit }

// Name returns the Semaphore's name (see Concurrency.Name).
func (s *Semaphore) Name() string { return s.spec.Name }

// Waiting returns how many callers of this Semaphore wait for a slot of
// key.
func (s *Semaphore) Waiting(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Acquire takes a slot of key, waiting until one is free or ctx ends (it
// then returns ctx's error). It returns the function that releases the
// slot: call it once the work is done, as with defer release(). Calling
// it again does nothing. Until then the slot is renewed in the
// background; a holder that cannot renew it for a whole TTL (a process
// paused, or cut off from the store) loses it to others. An invalid key
// is an error wrapping ErrInvalidKey; the store's errors end the wait.
func (s *Semaphore) Acquire(ctx context.Context, key string) (release func(), err error) {
	return s.acquire(ctx, key, true)
}

// TryAcquire takes a slot of key if one is free now, and never waits:
// with every slot held, or callers of this Semaphore already waiting for
// one (which it does not overtake), it fails with ErrNoSlots. Otherwise
// it is Acquire.
func (s *Semaphore) TryAcquire(ctx context.Context, key string) (release func(), err error) {
	return s.acquire(ctx, key, false)
}

func (s *Semaphore) acquire(ctx context.Context, key string, wait bool) (func(), error) {
	if err := driver.CheckKey(key); err != nil {
		return nil, err
	}
	holder := newHolder()
	s.mu.Lock()
	q := s.queues[key]
	if q == nil {
		q = &slotQueue{freed: make(chan struct{}, 1)}
		s.queues[key] = q
	}
	if !wait && len(q.waiters) > 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %d waiting here for %q", ErrNoSlots, len(q.waiters), key)
	}
	q.users++
	turn := make(chan struct{})
	q.waiters = append(q.waiters, turn)
	if len(q.waiters) == 1 {
		close(turn)
	}
	s.mu.Unlock()

	release, err := s.wait(ctx, key, q, turn, holder, wait)
	s.mu.Lock()
	s.leave(q, turn)
	if err != nil {
		s.done(key, q)
	}
	s.mu.Unlock()
	return release, err
}

// wait waits for the waiter's turn, then for a slot.
func (s *Semaphore) wait(ctx context.Context, key string, q *slotQueue, turn chan struct{}, holder string, wait bool) (func(), error) {
	select {
	case <-turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var timer *time.Timer
	for {
		g, err := s.slots.AcquireSlot(ctx, key, s.spec, holder)
		if err != nil {
			if ctx.Err() != nil {
				// Cut short, the call may have taken a slot after all:
				// give it back rather than leave it to expire.
				s.releaseSlot(key, holder)
			}
			return nil, err
		}
		if g.Acquired {
			return s.hold(key, q, holder), nil
		}
		if !wait {
			return nil, fmt.Errorf("%w: %d of %d held for %q", ErrNoSlots, g.Held, s.spec.Limit, key)
		}
		d := min(time.Duration(g.RetryAfter)*time.Microsecond, slotPoll)
		if timer == nil {
			timer = time.NewTimer(d)
			defer timer.Stop()
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.freed:
		case <-timer.C:
		}
	}
}

// leave takes a waiter out of its queue, and lets the next one ask.
// s.mu is held.
func (s *Semaphore) leave(q *slotQueue, turn chan struct{}) {
	for i, w := range q.waiters {
		if w == turn {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(q.waiters) > 0 {
				close(q.waiters[0])
			}
			return
		}
	}
}

// done drops a user of key's queue, and the queue once it has none.
// s.mu is held.
func (s *Semaphore) done(key string, q *slotQueue) {
	q.users--
	if q.users == 0 && s.queues[key] == q {
		delete(s.queues, key)
	}
}

// hold renews holder's slot every TTL/3 until the returned function
// releases it.
func (s *Semaphore) hold(key string, q *slotQueue, holder string) func() {
	var (
		mu       sync.Mutex
		released bool
		renew    *time.Timer
	)
	every := s.ttl / 3
	mu.Lock()
	defer mu.Unlock()
	renew = time.AfterFunc(every, func() {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		held, err := s.slots.RenewSlot(ctx, key, s.spec, holder)
		cancel()
		mu.Lock()
		defer mu.Unlock()
		// A renewal that failed is tried again; one that found the slot
		// gone (its lease ended) stops.
		if !released && (err != nil || held) {
			renew.Reset(every)
		}
	})
	return func() {
		mu.Lock()
		if released {
			mu.Unlock()
			return
		}
		released = true
		renew.Stop()
		mu.Unlock()
		s.releaseSlot(key, holder)
		s.mu.Lock()
		select {
		case q.freed <- struct{}{}:
		default:
		}
		s.done(key, q)
		s.mu.Unlock()
	}
}

// releaseSlot gives holder's slot back, within the TTL: a release that
// fails leaves the slot to expire.
func (s *Semaphore) releaseSlot(key, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), min(s.ttl, 5*time.Second))
	defer cancel()
	s.slots.ReleaseSlot(ctx, key, s.spec, holder)
}

// newHolder returns a holder unique across processes: 128 random bits.
func newHolder() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
