// Package metrics exports what ratekeeper limiters decide, and how long
// their store takes, to Prometheus. It is a module of its own, so that
// ratekeeper itself does not depend on the Prometheus client.
//
// Wrap the store the limiters use, and register the Metrics:
//
//	m := metrics.New()
//	prometheus.MustRegister(m) // served by promhttp.Handler() on /metrics
//	lim, err := ratekeeper.New(m.Wrap(redisstore.New(client)), policy,
//		ratekeeper.WithName("api"))
//
// Every call a limiter makes to its store is then timed and counted under
// the limiter's name (see ratekeeper.WithName; limiters of one name share
// their series, so name them apart). Limiter.Wait asks the store again
// after each denial, so each of its attempts counts. With the default
// namespace:
//
//   - ratekeeper_decisions_total{limiter, policy, outcome} counts
//     decisions by outcome: "allowed", "denied", or "error" when the store
//     failed. policy is Result.Policy: the limiter's own name, or for an
//     All the binding policy; for an error, the limiter's name. Peeks
//     (cost 0) decide nothing and are not counted.
//   - ratekeeper_policy_denials_total{limiter, policy} counts, for the
//     limiters of several policies (ratekeeper.All), every policy that
//     denied a request: the one a denial names is only the binding one.
//   - ratekeeper_store_duration_seconds{limiter, op} is the latency of
//     every store call, op "decide", "reset", "charge" or "refund",
//     failed ones included. A decision on several keys at once (see
//     driver.MultiDecider) is timed as a "decide" of each limiter among
//     its requests.
//   - ratekeeper_deny_cache_hits_total counts the decisions that the
//     wrapped stores' deny caches answered without a round trip (see
//     redisstore.WithDenyCache).
//
// "error" counts store failures only: a Limiter rejects an invalid key or
// cost before asking its store, so those errors never reach the metrics.
// Neither does a call abandoned because its context was canceled: a client
// going away is not a store failure. Such a call is still timed, and
// logged at level Debug; store failures are logged at level Error.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/driver"
)

// DefaultNamespace begins every metric's name unless WithNamespace says
// otherwise.
const DefaultNamespace = "ratekeeper"

// DefaultBuckets are the upper bounds, in seconds, of the latency
// histogram's buckets unless WithBuckets says otherwise: from 100µs, an
// in-process store or a deny cache hit, through a Redis round trip (a
// millisecond or so), to 1s, beyond any sensible store timeout.
var DefaultBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// Label values.
const (
	outcomeAllowed = "allowed"
	outcomeDenied  = "denied"
	outcomeError   = "error"
	opDecide       = "decide"
	opReset        = "reset"
	opDecideAll    = "decide_all"
	opCharge       = "charge"
	opRefund       = "refund"
)

// Metrics records the calls of limiters to the stores it wraps (see
// Wrap). It is a prometheus.Collector: register it with a Registerer. It
// is safe for concurrent use.
type Metrics struct {
	logger    *slog.Logger // nil: slog.Default() when logging
	decisions *prometheus.CounterVec
	denials   *prometheus.CounterVec
	durations *prometheus.HistogramVec
	denyHits  *prometheus.Desc

	// limiters maps a limiter's name to its series, resolved once so that
	// a decision costs a map lookup and no allocation. The map is copied
	// on every addition, which happens once per limiter and policy.
	limiters atomic.Pointer[map[string]*limiterSeries]
	mu       sync.Mutex // serializes additions to limiters and hitSources
	// hitSources are the wrapped stores with a deny cache; append only.
	hitSources []hitCounter
}

// limiterSeries are the series of one limiter name. It is never modified
// once published: an addition publishes a new one.
type limiterSeries struct {
	decide   prometheus.Observer
	errors   prometheus.Counter
	policies []policySeries
}

type policySeries struct {
	name            string
	allowed, denied prometheus.Counter
	denials         prometheus.Counter // nil unless the limiter is an All
}

// hitCounter is a store that answers some decisions from a deny cache, as
// redisstore.Store does.
type hitCounter interface{ DenyCacheHits() int64 }

// An Option configures Metrics.
type Option func(*options)

type options struct {
	namespace string
	buckets   []float64
	logger    *slog.Logger
}

// WithNamespace sets the prefix of every metric's name (default
// DefaultNamespace); "" leaves the names bare, as "decisions_total".
func WithNamespace(namespace string) Option {
	return func(o *options) { o.namespace = namespace }
}

// WithBuckets sets the upper bounds, in seconds and increasing, of the
// buckets of the latency histogram (default DefaultBuckets). New panics
// if they do not increase.
func WithBuckets(buckets ...float64) Option {
	return func(o *options) { o.buckets = slices.Clone(buckets) }
}

// WithLogger sets the logger of store failures (level Error) and of store
// calls abandoned for a canceled context (level Debug). The default is
// slog.Default() at the time of logging.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// New returns a Metrics that has seen nothing yet. Register it, and pass
// the stores of the limiters to watch through Wrap.
func New(opts ...Option) *Metrics {
	o := options{namespace: DefaultNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.buckets) == 0 {
		o.buckets = slices.Clone(DefaultBuckets)
	}
	// The client would panic at the first decision of each limiter.
	for i := 1; i < len(o.buckets); i++ {
		if !(o.buckets[i] > o.buckets[i-1]) {
			panic(fmt.Sprintf("metrics: WithBuckets: bucket %v does not follow %v", o.buckets[i], o.buckets[i-1]))
		}
	}
	m := &Metrics{
		logger: o.logger,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.namespace,
			Name:      "decisions_total",
			Help: "Rate limit decisions by limiter, policy (of an All, the binding one) and outcome: " +
				"allowed, denied, or error when the store failed.",
		}, []string{"limiter", "policy", "outcome"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.namespace,
			Name:      "policy_denials_total",
			Help:      "Denied decisions of limiters of several policies, counted once for each policy that denied.",
		}, []string{"limiter", "policy"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.namespace,
			Name:      "store_duration_seconds",
			Help:      "Duration of the rate limit store's calls, failed ones included, by limiter and op (decide or reset).",
			Buckets:   o.buckets,
		}, []string{"limiter", "op"}),
		denyHits: prometheus.NewDesc(prometheus.BuildFQName(o.namespace, "", "deny_cache_hits_total"),
			"Rate limit decisions answered by a deny cache, without a round trip to the store.", nil, nil),
	}
	m.limiters.Store(&map[string]*limiterSeries{})
	return m
}

// Describe sends the descriptors of every metric, as a
// prometheus.Collector does.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.denials.Describe(ch)
	m.durations.Describe(ch)
	ch <- m.denyHits
}

// Collect sends the current value of every metric, as a
// prometheus.Collector does. The deny cache hits are read from the stores
// now, and sent once a store that counts them (as redisstore.Store does)
// has been wrapped.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.denials.Collect(ch)
	m.durations.Collect(ch)
	m.mu.Lock()
	sources := m.hitSources // append only: the elements seen stay as they are
	m.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	var hits int64
	for _, s := range sources {
		hits += s.DenyCacheHits()
	}
	ch <- prometheus.MustNewConstMetric(m.denyHits, prometheus.CounterValue, float64(hits))
}

// limiter returns the series of spec's limiter.
func (m *Metrics) limiter(spec *driver.ValidSpec) *limiterSeries {
	if ls := (*m.limiters.Load())[spec.Name()]; ls != nil {
		return ls
	}
	return m.add(spec, "")
}

// policy returns the series of the named policy of spec's limiter.
func (m *Metrics) policy(spec *driver.ValidSpec, ls *limiterSeries, name string) *policySeries {
	if name == "" {
		name = spec.Name() // a store that leaves Result.Policy empty
	}
	isAll := spec.IsAll()
	for {
		for i := range ls.policies {
			if p := &ls.policies[i]; p.name == name && (p.denials != nil || !isAll) {
				return p
			}
		}
		ls = m.add(spec, name)
	}
}

// add publishes the series of spec's limiter with any that were missing:
// those of every policy of spec and, unless empty, of policy. Limiters of
// one name may have different policies.
func (m *Metrics) add(spec *driver.ValidSpec, policy string) *limiterSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.limiters.Load()
	ls := &limiterSeries{}
	if prev := old[spec.Name()]; prev != nil {
		*ls = *prev
		ls.policies = slices.Clone(prev.policies)
	} else {
		ls.decide = m.durations.WithLabelValues(spec.Name(), opDecide)
		ls.errors = m.decisions.WithLabelValues(spec.Name(), spec.Name(), outcomeError)
	}
	isAll := spec.IsAll()
	need := func(name string) {
		i := slices.IndexFunc(ls.policies, func(p policySeries) bool { return p.name == name })
		if i < 0 {
			ls.policies = append(ls.policies, policySeries{
				name:    name,
				allowed: m.decisions.WithLabelValues(spec.Name(), name, outcomeAllowed),
				denied:  m.decisions.WithLabelValues(spec.Name(), name, outcomeDenied),
			})
			i = len(ls.policies) - 1
		}
		if isAll && ls.policies[i].denials == nil {
			ls.policies[i].denials = m.denials.WithLabelValues(spec.Name(), name)
		}
	}
	if isAll {
		for _, p := range spec.Policies() {
			need(p.Name())
		}
	} else {
		need(spec.Name())
	}
	if policy != "" {
		need(policy)
	}
	next := maps.Clone(old)
	next[spec.Name()] = ls
	m.limiters.Store(&next)
	return ls
}

// failed logs a failed store call.
func (m *Metrics) failed(ctx context.Context, spec *driver.ValidSpec, op, key string, err error) {
	level, msg := slog.LevelError, "ratekeeper: store failed"
	if errors.Is(err, context.Canceled) {
		level, msg = slog.LevelDebug, "ratekeeper: store call canceled"
	}
	logger := m.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(ctx, level, msg,
		slog.String("limiter", spec.Name()), slog.String("algorithm", spec.Algorithm()),
		slog.String("op", op), slog.String("key", key), slog.Any("err", err))
}
