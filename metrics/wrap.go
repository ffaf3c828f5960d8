package metrics

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// Wrap returns a Store that passes every call on to store, and records it:
// give it to ratekeeper.New in place of store. The Store returned
// implements each optional interface of package driver (MultiDecider,
// Charger) exactly when store does, and Leaser when store is all three
// (as memstore and redisstore are), so that callers which look for one
// find it through the wrapper. A lease step counts as a decision of its
// request's cost; the requests a Limiter then decides from its lease, in
// process, never reach the store, and are not counted here. If store has a deny cache (a DenyCacheHits
// method, as redisstore.Store has), its hits are counted, once however
// often the store is wrapped. Wrap(nil) is nil.
func (m *Metrics) Wrap(store ratekeeper.Store) ratekeeper.Store {
	if store == nil {
		return nil
	}
	inner := store
	for { // wrapped already, maybe by another Metrics: look at the store itself
		w, ok := inner.(interface{ unwrap() *wrapped })
		if !ok {
			break
		}
		inner = w.unwrap().inner
	}
	if h, ok := inner.(hitCounter); ok {
		m.addHitSource(h)
	}
	w := &wrapped{m: m, inner: store}
	md, multi := store.(driver.MultiDecider)
	c, charger := store.(driver.Charger)
	l, leaser := store.(driver.Leaser)
	switch {
	case multi && charger && leaser:
		return leasingWrapped{w, multiDecider{w, md}, chargeRefunder{w, c}, leaseTaker{w, l}}
	case multi && charger:
		return fullWrapped{w, multiDecider{w, md}, chargeRefunder{w, c}}
	case multi:
		return multiWrapped{w, multiDecider{w, md}}
	case charger:
		return chargerWrapped{w, chargeRefunder{w, c}}
	}
	return w
}

func (m *Metrics) addHitSource(h hitCounter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Only values that compare without panicking can be recognized.
	if reflect.ValueOf(h).Comparable() {
		for _, s := range m.hitSources {
			if reflect.ValueOf(s).Comparable() && s == h {
				return
			}
		}
	}
	m.hitSources = append(m.hitSources, h)
}

// epoch lets store calls be timed on the monotonic clock alone: Since a
// time with a monotonic reading skips the wall clock, which Now reads too.
var epoch = time.Now()

// wrapped is the Store that Wrap returns for a store with no optional
// interface; the others embed it, and add theirs.
type wrapped struct {
	m     *Metrics
	inner ratekeeper.Store
}

// multiDecider and chargeRefunder implement an optional interface each,
// through the inner store's: the Stores that Wrap returns for stores with
// optional interfaces embed those they have.
type (
	multiDecider struct {
		w     *wrapped
		inner driver.MultiDecider
	}
	chargeRefunder struct {
		w     *wrapped
		inner driver.Charger
	}
)

type (
	multiWrapped struct {
		*wrapped
		multiDecider
	}
	chargerWrapped struct {
		*wrapped
		chargeRefunder
	}
	fullWrapped struct {
		*wrapped
		multiDecider
		chargeRefunder
	}
	leasingWrapped struct {
		*wrapped
		multiDecider
		chargeRefunder
		leaseTaker
	}
)

// leaseTaker implements driver.Leaser through the inner store's.
type leaseTaker struct {
	w     *wrapped
	inner driver.Leaser
}

// Lease makes the lease step through the inner store, and records it as
// a decision of its request's cost.
func (lt leaseTaker) Lease(ctx context.Context, key string, spec *driver.ValidSpec, req driver.LeaseRequest) (driver.LeaseGrant, error) {
	w := lt.w
	start := time.Since(epoch)
	g, err := lt.inner.Lease(ctx, key, spec, req)
	elapsed := time.Since(epoch) - start
	ls := w.m.limiter(spec)
	ls.decide.Observe(elapsed.Seconds())
	if err != nil {
		w.failed(ctx, ls, spec, opDecide, key, err)
		return g, err
	}
	w.count(ls, spec, req.Min, g.Decision)
	return g, nil
}

var (
	_ ratekeeper.Store    = (*wrapped)(nil)
	_ driver.MultiDecider = multiWrapped{}
	_ driver.Charger      = chargerWrapped{}
	_ driver.MultiDecider = fullWrapped{}
	_ driver.Charger      = fullWrapped{}
	_ driver.Leaser       = leasingWrapped{}
)

func (w *wrapped) unwrap() *wrapped { return w }

// Charge charges through the inner store, and records the call.
func (c chargeRefunder) Charge(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return c.charge(ctx, opCharge, key, spec, n)
}

// Refund refunds through the inner store, and records the call.
func (c chargeRefunder) Refund(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return c.charge(ctx, opRefund, key, spec, n)
}

// Decide decides through the inner store, and records the call.
func (w *wrapped) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	start := time.Since(epoch)
	d, err := w.inner.Decide(ctx, key, spec, n)
	elapsed := time.Since(epoch) - start
	ls := w.m.limiter(spec)
	ls.decide.Observe(elapsed.Seconds())
	if err != nil {
		w.failed(ctx, ls, spec, opDecide, key, err)
		return d, err
	}
	w.count(ls, spec, n, d)
	return d, nil
}

// count counts a decision of cost n under spec, unless a peek: nothing
// was decided, and a "denied" peek refused nobody.
func (w *wrapped) count(ls *limiterSeries, spec *driver.ValidSpec, n int64, d driver.Decision) {
	if n == 0 {
		return
	}
	policy := spec.Name()
	if spec.IsAll() && d.Binding < spec.NumParts() {
		policy = spec.Part(d.Binding).Name()
	}
	if d.Allowed {
		w.m.policy(spec, ls, policy).allowed.Inc()
		return
	}
	w.m.policy(spec, ls, policy).denied.Inc()
	for i, p := range d.Parts {
		if !p.Allowed && i < spec.NumParts() {
			w.m.policy(spec, ls, spec.Part(i).Name()).denials.Inc()
		}
	}
}

// failed counts and logs a failed store call, unless its context was
// canceled: a client going away is not a store failure.
func (w *wrapped) failed(ctx context.Context, ls *limiterSeries, spec *driver.ValidSpec, op, key string, err error) {
	if !errors.Is(err, context.Canceled) {
		ls.errors.Inc()
	}
	w.m.failed(ctx, spec, op, key, err)
}

// DecideAll decides through the inner store, and records the call: each
// request as a decision of its limiter, and the call's latency once for
// each limiter among the requests.
func (md multiDecider) DecideAll(ctx context.Context, reqs []driver.Request) ([]driver.Decision, error) {
	w := md.w
	start := time.Since(epoch)
	ds, err := md.inner.DecideAll(ctx, reqs)
	elapsed := time.Since(epoch) - start
	for i, r := range reqs {
		if !r.Spec.Valid() || firstOf(reqs[:i], r.Spec.Name()) {
			continue
		}
		ls := w.m.limiter(r.Spec)
		ls.decide.Observe(elapsed.Seconds())
		if err != nil {
			w.failed(ctx, ls, r.Spec, opDecideAll, r.Key, err)
		}
	}
	if err == nil && len(ds) == len(reqs) {
		for i, r := range reqs {
			if r.Spec.Valid() {
				w.count(w.m.limiter(r.Spec), r.Spec, r.N, ds[i])
			}
		}
	}
	return ds, err
}

// firstOf reports whether a request of reqs has a spec of the given name.
func firstOf(reqs []driver.Request, name string) bool {
	for _, r := range reqs {
		if r.Spec.Valid() && r.Spec.Name() == name {
			return true
		}
	}
	return false
}

// charge charges or refunds through the inner store, and records the
// call's latency, and its failure if any. A charge or a refund is no
// decision: it takes or gives back whatever the outcome.
func (c chargeRefunder) charge(ctx context.Context, op, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	w := c.w
	start := time.Since(epoch)
	var d driver.Decision
	var err error
	if op == opCharge {
		d, err = c.inner.Charge(ctx, key, spec, n)
	} else {
		d, err = c.inner.Refund(ctx, key, spec, n)
	}
	w.m.durations.WithLabelValues(spec.Name(), op).Observe((time.Since(epoch) - start).Seconds())
	if err != nil {
		w.failed(ctx, w.m.limiter(spec), spec, op, key, err)
	}
	return d, err
}

// Reset resets through the inner store, and records the call. Resets are
// rare, so their series are resolved on each call.
func (w *wrapped) Reset(ctx context.Context, key string, spec *driver.ValidSpec) error {
	start := time.Since(epoch)
	err := w.inner.Reset(ctx, key, spec)
	w.m.durations.WithLabelValues(spec.Name(), opReset).Observe((time.Since(epoch) - start).Seconds())
	if err != nil {
		w.m.failed(ctx, spec, opReset, key, err)
	}
	return err
}
