package ratekeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// Leases configure a Limiter that decides a hot key's requests in
// process, from leases (see WithLeases).
type Leases struct {
	// TTL is the longest time a lease is held: from 1ms to MaxLeaseTTL.
	// A holder spends a lease for at most LeaseSpend of it, measured
	// from when it sent the request that took it, and the store counts
	// it for all of it, measured on the store's clock from when the
	// store took it.
	TTL time.Duration
	// MaxKeys bounds how many keys hold a lease at once (default
	// DefaultLeaseKeys). A new key past it gives back the lease of the
	// key among a sample that was used least recently.
	MaxKeys int
}

// WithLeases makes the Limiter take leases of a key's allowance from its
// store, and decide the key's later requests in process from them until
// the lease is spent or its TTL ends, so that a hot key costs its store a
// call per lease rather than per request. A lease is taken in one atomic
// step, from the key's own state; its size follows the key's demand on
// this Limiter (a key seen once takes no more than it asked for). What a
// lease holds counts as taken in the store until it is given back or its
// TTL ends there, and nothing refills it meanwhile: over every window the
// fleet admits no more than the policy's bound, whatever mix of Limiters
// with leases and without shares the key. Unspent units go back when a
// lease ends, and on Close; a holder that crashes costs at most its
// lease, until its TTL ends in the store.
//
// TokenBucket, GCRA, LeakyBucket and FixedWindow take leases. The
// sliding windows, and All, make New fail with a *PolicyError that says
// why; so does a TTL out of range.
// The store must take leases (a driver.Leaser: memstore and redisstore
// do), or New fails with an error matching ErrNoLeases.
//
// With leases: Peek's Remaining counts what this Limiter's lease of the
// key holds; Charge and Refund give the key's lease back first, then go
// to the store; Reset drops this Limiter's lease (the other Limiters'
// leases of the key end within their TTL); a denial is the store's, with
// its RetryAfter, and the Limiter asks again by itself when the store
// said a unit would be back, so that a Limiter whose requests come seldom
// gets its share of the units that come back, not only what those whose
// requests come often leave (see docs/algorithms.md). While the store is down, the Limiter spends what its
// leases hold until they end, then fails as it does without leases. Call
// Close when done with the Limiter.
func WithLeases(leases Leases) Option {
	return func(l *Limiter) { l.leaseOptions = &leases }
}

// newLeaser checks the options of WithLeases for spec on store.
func newLeaser(store Store, spec *driver.ValidSpec, o Leases) (*leaser, error) {
	switch {
	case spec.IsAll():
		return nil, policyError("WithLeases", "", "All takes no leases: lease the policies as Limiters of their own")
	case !spec.Leases():
		return nil, policyError("WithLeases", "", "%s takes no leases: %s", spec.Algorithm(), noLeaseReason(spec.Algorithm()))
	case o.TTL < time.Millisecond || o.TTL > MaxLeaseTTL:
		return nil, policyError("WithLeases", "TTL", "%v is outside 1ms to %v", o.TTL, MaxLeaseTTL)
	case o.MaxKeys < 0:
		return nil, policyError("WithLeases", "MaxKeys", "%d is negative", o.MaxKeys)
	}
	ls, ok := store.(driver.Leaser)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNoLeases, store)
	}
	if o.MaxKeys == 0 {
		o.MaxKeys = DefaultLeaseKeys
	}
	le := &leaser{store: ls, decider: store, spec: spec, ttl: o.TTL, maxKeys: o.MaxKeys, now: time.Now,
		keys: make(map[string]*keyLease), stop: make(chan struct{}), done: make(chan struct{})}
	go le.loop()
	return le, nil
}

// noLeaseReason says why an algorithm takes no leases.
func noLeaseReason(algorithm string) string {
	switch algorithm {
	case driver.AlgorithmSlidingWindowLog:
		return "a log stamps each unit with the time it was taken, and a leased unit spent later would leave the rolling window before its spending did, letting more through than Limit in a window"
	case driver.AlgorithmSlidingWindowCounter:
		return "its estimate weighs the previous window's count by time, and a leased unit spent later in the next window would be weighed as if spent earlier"
	}
	return "its state does not count what leases hold"
}

// leaser holds a Limiter's leases, one per key at most.
type leaser struct {
	store   driver.Leaser
	decider Store // the same store, deciding once closed
	spec    *driver.ValidSpec
	ttl     time.Duration
	maxKeys int
	// now reads the holder's clock: only the time between two readings
	// matters, never how it compares with the store's.
	now func() time.Time

	mu      sync.Mutex
	keys    map[string]*keyLease
	pending []pendingBack // leases of forgotten keys, to give back
	closed  bool

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// pendingBack is a lease to give back in the background.
type pendingBack struct {
	key    string
	lease  driver.Lease
	unused int64
	until  time.Time // later, the store may no longer count it
}

// keyLease is one key's lease, and its demand on this Limiter.
type keyLease struct {
	mu       sync.Mutex
	lease    driver.Lease // as the store counts it; zero for none
	left     int64        // its units not yet spent
	deadline time.Time    // stop spending it then (monotonic)
	expiry   time.Time    // the store stops counting it no sooner
	renewing chan struct{}
	gone     bool // forgotten: look the key up anew
	ahead    bool // a lease step ahead of requests is due (see ahead)

	denied     time.Time // a request of deniedCost or more is denied until then
	deniedCost int64
	denial     Result // the store's denial, sent at denied − its RetryAfter

	granted   time.Time // when the last lease step was sent
	spent     int64     // units spent since granted
	size      int64     // the last lease step's Want
	remaining int64     // the store's Remaining after the last step
	reset     time.Time // when the store said the key is full again
	used      time.Time // the last request
}

// get returns key's keyLease, making one, and forgetting another key
// when full; nil once the leaser is closed.
func (le *leaser) get(key string, now time.Time) *keyLease {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.closed {
		return nil
	}
	if kl := le.keys[key]; kl != nil {
		return kl
	}
	if len(le.keys) >= le.maxKeys {
		le.evict()
	}
	kl := &keyLease{used: now}
	le.keys[key] = kl
	return kl
}

// evict forgets, among a few keys, the one used least recently, and gives
// its lease back in the background. le.mu is held.
func (le *leaser) evict() {
	var victimKey string
	var victim *keyLease
	sampled := 0
	for k, kl := range le.keys { // random order: a fair sample
		kl.mu.Lock()
		older := victim == nil || kl.used.Before(victim.used)
		kl.mu.Unlock()
		if older {
			victimKey, victim = k, kl
		}
		if sampled++; sampled == 8 {
			break
		}
	}
	le.forget(victimKey, victim)
}

// forget drops key's keyLease, queueing its lease to be given back. le.mu
// is held.
func (le *leaser) forget(key string, kl *keyLease) {
	delete(le.keys, key)
	kl.mu.Lock()
	kl.gone = true
	if kl.left > 0 {
		le.pending = append(le.pending, pendingBack{key, kl.lease, kl.left, kl.expiry})
	}
	kl.lease, kl.left = driver.Lease{}, 0
	kl.mu.Unlock()
}

// allow decides a request of cost n > 0 for key from its lease, taking a
// new lease when it is spent or over. Once the leaser is closed, the
// store decides, as for a Limiter without leases.
func (le *leaser) allow(ctx context.Context, key string, n int64) (Result, error) {
	for {
		now := le.now()
		kl := le.get(key, now)
		if kl == nil {
			d, err := le.decider.Decide(ctx, key, le.spec, n)
			if err != nil {
				return Result{}, err
			}
			return decisionResult(le.spec, d)
		}
		kl.mu.Lock()
		if kl.gone {
			kl.mu.Unlock()
			continue
		}
		kl.used = now
		if kl.left >= n && now.Before(kl.deadline) {
			kl.left -= n
			kl.spent += n
			res := le.fromLease(kl, now)
			kl.mu.Unlock()
			return res, nil
		}
		if n >= kl.deniedCost && now.Before(kl.denied) {
			// The store's denial, as it stands now: only time, or a
			// lease given back, adds allowance.
			res := kl.denial
			res.RetryAfter = kl.denied.Sub(now)
			res.ResetAfter = max(kl.reset.Sub(now), res.RetryAfter)
			kl.mu.Unlock()
			return res, nil
		}
		if ch := kl.renewing; ch != nil {
			kl.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return Result{}, ctx.Err()
			}
		}
		return le.renew(ctx, key, kl, n, now)
	}
}

// fromLease is the Result of a request decided from kl's lease. kl.mu is
// held.
func (le *leaser) fromLease(kl *keyLease, now time.Time) Result {
	return Result{
		Policy:     le.spec.Name(),
		Allowed:    true,
		Limit:      le.spec.Limit(),
		Remaining:  float64(kl.remaining)/driver.Unit + float64(kl.left),
		ResetAfter: max(kl.reset.Sub(now), 0),
	}
}

// renew makes a lease step for a request of cost n: it gives back kl's
// lease, and takes a new one sized to the key's demand. kl.mu is held,
// and released.
func (le *leaser) renew(ctx context.Context, key string, kl *keyLease, n int64, now time.Time) (Result, error) {
	ch := make(chan struct{})
	kl.renewing = ch
	req := driver.LeaseRequest{Min: n, Want: kl.want(max(n, 1), now, le.ttl, le.spec.MaxCost()), TTL: le.ttl.Microseconds()}
	if kl.lease.Units > 0 {
		req.Back, req.Unused = kl.lease, kl.left
	}
	kl.lease, kl.left = driver.Lease{}, 0
	kl.mu.Unlock()

	sent := le.now()
	g, err := le.store.Lease(ctx, key, le.spec, req)
	var res Result
	if err == nil {
		res, err = decisionResult(le.spec, g.Decision)
	}
	kl.mu.Lock()
	kl.renewing = nil
	close(ch)
	if err == nil {
		kl.granted, kl.spent, kl.size = sent, 0, req.Want
		if res.Allowed {
			kl.spent = n
		}
		kl.remaining, kl.reset = g.Remaining, sent.Add(res.ResetAfter)
		kl.denied = time.Time{}
		if !res.Allowed {
			kl.denied, kl.deniedCost, kl.denial = sent.Add(res.RetryAfter), max(n, 1), res
			// Not for a wait past the longest lease (a window of a day, a
			// month): a timer would hold the key that long.
			if !kl.ahead && !kl.gone && res.RetryAfter <= MaxLeaseTTL {
				kl.ahead = true
				time.AfterFunc(max(res.RetryAfter, le.ttl/100), func() { le.takeAhead(key, kl) })
			}
		}
		if g.Units > 0 && !kl.gone {
			kl.lease, kl.left = g.Lease, g.Units
			kl.deadline, kl.expiry = sent.Add(spendFor(g.Lasts)), sent.Add(time.Duration(g.Lasts)*time.Microsecond)
		} else if g.Units > 0 {
			back := pendingBack{key, g.Lease, g.Units, sent.Add(time.Duration(g.Lasts) * time.Microsecond)}
			le.mu.Lock()
			closed := le.closed
			if !closed {
				le.pending = append(le.pending, back)
			}
			le.mu.Unlock()
			if closed {
				// Close has given back all it knew of: this lease, taken
				// meanwhile, goes back now.
				kl.mu.Unlock()
				le.giveBackAll([]pendingBack{back}, le.now())
				return res, err
			}
		}
	}
	kl.mu.Unlock()
	return res, err
}

// takeAhead takes a lease of key ahead of its next request, after the
// store denied one: at the time the store said a unit would be there, and
// again at each denial, as long as the key has requests (one in the last
// TTL). Without it, each request of a Limiter with little demand would
// find the units that came back taken by the Limiters whose requests come
// more often; with it, every Limiter with demand asks the store when a
// unit comes back, and their chances are even.
func (le *leaser) takeAhead(key string, kl *keyLease) {
	kl.mu.Lock()
	kl.ahead = false
	now := le.now()
	if kl.gone || kl.renewing != nil || kl.left > 0 && now.Before(kl.deadline) || now.Sub(kl.used) > le.ttl {
		kl.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), le.ttl)
	defer cancel()
	le.renew(ctx, key, kl, 0, now) // an error: the next request tries again
}

// spendFor is how long a holder spends a lease that the store counts for
// lasts microseconds from when it took it: LeaseSpend percent of it,
// measured from when the holder sent the step, which came first.
func spendFor(lasts int64) time.Duration {
	return time.Duration(lasts) * time.Microsecond * LeaseSpend / 100
}

// want is the size of the next lease of a key for a request of cost n: n
// for a key without a past, else what the key spent per TTL since its
// last lease step, at most twice the last size plus n, and at most
// maxCost. kl.mu is held.
func (kl *keyLease) want(n int64, now time.Time, ttl time.Duration, maxCost int64) int64 {
	if kl.granted.IsZero() {
		return n
	}
	elapsed := max(now.Sub(kl.granted), time.Microsecond)
	demand := (kl.spent*int64(ttl) + int64(elapsed) - 1) / int64(elapsed) // ceil
	return min(max(demand+n, n), 2*kl.size+n, maxCost)
}

// peek adds the units of key's lease to a peek's Result.
func (le *leaser) peek(key string, res Result) Result {
	le.mu.Lock()
	kl := le.keys[key]
	le.mu.Unlock()
	if kl == nil {
		return res
	}
	kl.mu.Lock()
	if le.now().Before(kl.deadline) && kl.left > 0 {
		res.Remaining += float64(kl.left)
		res.Allowed, res.RetryAfter = true, 0
	}
	kl.mu.Unlock()
	return res
}

// giveBack gives key's lease back to the store, before a charge or a
// refund that must see the key's whole state.
func (le *leaser) giveBack(ctx context.Context, key string) error {
	le.mu.Lock()
	kl := le.keys[key]
	le.mu.Unlock()
	if kl == nil {
		return nil
	}
	for {
		kl.mu.Lock()
		if ch := kl.renewing; ch != nil {
			kl.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		lease, unused := kl.lease, kl.left
		kl.lease, kl.left = driver.Lease{}, 0
		kl.mu.Unlock()
		if lease.Units == 0 {
			return nil
		}
		_, err := le.store.Lease(ctx, key, le.spec, driver.LeaseRequest{Back: lease, Unused: unused})
		return err
	}
}

// drop forgets key's lease without giving it back: its state is gone.
func (le *leaser) drop(key string) {
	le.mu.Lock()
	if kl := le.keys[key]; kl != nil {
		delete(le.keys, key)
		kl.mu.Lock()
		kl.gone, kl.lease, kl.left = true, driver.Lease{}, 0
		kl.mu.Unlock()
	}
	le.mu.Unlock()
}

// loop gives back, every tenth of a TTL, the leases whose holder's time
// is over and those of forgotten keys, and forgets keys idle for a TTL.
func (le *leaser) loop() {
	defer close(le.done)
	tick := time.NewTicker(max(le.ttl/10, 100*time.Microsecond))
	defer tick.Stop()
	for {
		select {
		case <-le.stop:
			return
		case <-tick.C:
			le.sweep()
		}
	}
}

// sweep gives back what is due, as loop says.
func (le *leaser) sweep() {
	le.mu.Lock()
	now := le.now()
	for key, kl := range le.keys {
		kl.mu.Lock()
		idle := kl.renewing == nil && now.Sub(kl.used) > le.ttl
		over := kl.left > 0 && kl.renewing == nil && !now.Before(kl.deadline)
		if over {
			le.pending = append(le.pending, pendingBack{key, kl.lease, kl.left, kl.expiry})
			kl.lease, kl.left = driver.Lease{}, 0
		}
		kl.mu.Unlock()
		if idle {
			le.forget(key, kl)
		}
	}
	pending := le.pending
	le.pending = nil
	le.mu.Unlock()
	le.giveBackAll(pending, now)
}

// giveBackAll gives the leases back, each within what is left of its
// time in the store.
func (le *leaser) giveBackAll(pending []pendingBack, now time.Time) error {
	var errs []error
	for _, p := range pending {
		if !now.Before(p.until) {
			continue // the store no longer counts it
		}
		ctx, cancel := context.WithDeadline(context.Background(), p.until)
		_, err := le.store.Lease(ctx, p.key, le.spec, driver.LeaseRequest{Back: p.lease, Unused: p.unused})
		cancel()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// close stops the background loop and gives every lease back.
func (le *leaser) close() error {
	le.closeOnce.Do(func() { close(le.stop) })
	<-le.done
	le.mu.Lock()
	pending := le.pending
	le.pending = nil
	for key, kl := range le.keys {
		kl.mu.Lock()
		if kl.left > 0 {
			pending = append(pending, pendingBack{key, kl.lease, kl.left, kl.expiry})
		}
		kl.lease, kl.left, kl.gone = driver.Lease{}, 0, true
		kl.mu.Unlock()
		delete(le.keys, key)
	}
	le.closed = true
	le.mu.Unlock()
	return le.giveBackAll(pending, le.now())
}
