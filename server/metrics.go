package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a descriptor, the outcome label of
// ratekeeper_server_decisions_total.
const (
	outcomeOK              = "ok"
	outcomeOverLimit       = "over_limit"
	outcomeShadowOverLimit = "shadow_over_limit"
	outcomeNotTaken        = "not_taken"
	outcomeUnlimited       = "unlimited"
	outcomeNoRule          = "no_rule"
)

// Metrics are the service's Prometheus metrics. Their labels are bounded
// by the configuration: domains and rule names, never descriptor values.
// A nil *Metrics records nothing.
type Metrics struct {
	decisions    *prometheus.CounterVec
	shadow       *prometheus.CounterVec
	storeSeconds prometheus.Histogram
	storeErrors  prometheus.Counter
	storePartial prometheus.Counter
	generation   prometheus.Gauge
	reloadErrors prometheus.Counter
	lastReload   prometheus.Gauge
	panics       prometheus.Counter
	refunds      *prometheus.CounterVec
	quota        quotaMetrics

	mu     sync.Mutex
	labels map[labelPair]bool // the labels of the configuration in use
}

// NewMetrics registers the service's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_server_decisions_total",
			Help: "Descriptors decided, by domain, rule and outcome (ok, over_limit, shadow_over_limit, not_taken, unlimited, no_rule).",
		}, []string{"domain", "rule", "outcome"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_server_shadow_would_deny_total",
			Help: "Descriptors that a rule in shadow mode would have denied, by domain and rule.",
		}, []string{"domain", "rule"}),
		storeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratekeeper_server_store_seconds",
			Help:    "Time the store took to decide one request's descriptors, observed once per request that asked it (its enforced and its shadow rules' calls together).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_server_store_errors_total",
			Help: "Requests the store failed to decide.",
		}),
		storePartial: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_server_store_partly_applied_errors_total",
			Help: "Requests the store failed to decide after some of their descriptors had taken or given back their hits, which are not undone (on a Redis Cluster, those of the masters that answered). Counted in store_errors_total too.",
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_server_config_generation",
			Help: "Configurations loaded since the start: 1 for the first.",
		}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_server_config_reload_errors_total",
			Help: "Configuration reloads refused as invalid; the previous configuration stays.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_server_config_last_load_timestamp_seconds",
			Help: "When the configuration in use was loaded.",
		}),
		panics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_server_panics_total",
			Help: "Panics in handlers, recovered and answered as internal errors.",
		}),
		refunds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_server_refunds_refused_total",
			Help: "Refunds asked for where refunds are off, by domain and endpoint: is_negative_hits ignored (grpc, json), mode refund refused with 400 (decide).",
		}, []string{"domain", "endpoint"}),
	}
	m.quota = newQuotaMetrics()
	reg.MustRegister(m.decisions, m.shadow, m.storeSeconds, m.storeErrors, m.storePartial, m.generation, m.reloadErrors, m.lastReload, m.panics, m.refunds,
		m.quota.streams, m.quota.buckets, m.quota.reports, m.quota.assignments, m.quota.share, m.quota.converge)
	return m
}

// quotaMetrics are the rate limit quota service's metrics, by domain
// label, as the decisions' are.
type quotaMetrics struct {
	streams, buckets prometheus.Gauge
	reports          *prometheus.CounterVec
	assignments      *prometheus.CounterVec
	share, converge  *prometheus.HistogramVec
}

// Actions of ratekeeper_server_rlqs_assignments_total.
const (
	actionNew     = "new"
	actionRefresh = "refresh"
	actionDeny    = "deny_all"
	actionAllow   = "allow_all"
	actionAbandon = "abandon"
)

func newQuotaMetrics() quotaMetrics {
	return quotaMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_server_rlqs_streams",
			Help: "Open StreamRateLimitQuotas streams: the Envoys connected.",
		}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_server_rlqs_buckets",
			Help: "Quota buckets the open streams hold, a bucket counted once per stream that reports it.",
		}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_server_rlqs_reports_total",
			Help: "Usage reports received, by domain.",
		}, []string{"domain"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_server_rlqs_assignments_total",
			Help: "Bucket actions sent, by domain and action: new (a token bucket Envoy starts full), refresh (the same token bucket, its TTL restarted), deny_all (no free rate, or a bucket no quota bucket matches under -rlqs-unmatched=deny_all), allow_all (such a bucket under -rlqs-unmatched=allow_all), abandon (such a bucket by default).",
		}, []string{"domain", "action"}),
		share: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekeeper_server_rlqs_share_ratio",
			Help:    "Each token bucket sent to an Envoy (new or refreshed): its share of its quota bucket's rate, by domain.",
			Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95},
		}, []string{"domain"}),
		converge: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekeeper_server_rlqs_converge_seconds",
			Help:    "From an Envoy's reported demand shifting (by more than an eighth) until its share settles (the first assignment refreshed, not changed, after it), by domain.",
			Buckets: []float64{0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 20},
		}, []string{"domain"}),
	}
}

// MaxRuleLabels bounds the rules of a configuration that get labels of
// their own: the first MaxRuleLabels rules, in the order of their domains'
// names and then of their keys, are counted under their domain and name;
// the others under rule OtherLabel, and, beyond as many domains, domain
// OtherLabel too. So a configuration of any size makes at most about
// 7 × MaxRuleLabels series.
const MaxRuleLabels = 1000

// OtherLabel is the label of the rules and domains beyond MaxRuleLabels.
const OtherLabel = "_other"

// ruleMetrics are one rule's counters, resolved once per configuration.
type ruleMetrics struct {
	ok, over, shadowOver, notTaken, unlimited prometheus.Counter
	wouldDeny                                 prometheus.Counter
}

func (m *Metrics) rule(domain, name string) *ruleMetrics {
	if m == nil {
		return nil
	}
	c := func(outcome string) prometheus.Counter { return m.decisions.WithLabelValues(domain, name, outcome) }
	return &ruleMetrics{ok: c(outcomeOK), over: c(outcomeOverLimit), shadowOver: c(outcomeShadowOverLimit),
		notTaken: c(outcomeNotTaken), unlimited: c(outcomeUnlimited),
		wouldDeny: m.shadow.WithLabelValues(domain, name)}
}

func (rm *ruleMetrics) count(outcome string) {
	if rm == nil {
		return
	}
	switch outcome {
	case outcomeOK:
		rm.ok.Inc()
	case outcomeOverLimit:
		rm.over.Inc()
	case outcomeShadowOverLimit:
		rm.shadowOver.Inc()
		rm.wouldDeny.Inc()
	case outcomeNotTaken:
		rm.notTaken.Inc()
	case outcomeUnlimited:
		rm.unlimited.Inc()
	}
}

// labelPair is a domain and rule label.
type labelPair struct{ domain, rule string }

// labelling is the labels of one configuration: which rules and domains
// have their own, and the counters of descriptors that no rule matched.
// It is made before the configuration is used, and read only after.
type labelling struct {
	m       *Metrics
	pairs   map[labelPair]bool
	domains map[string]bool // the domains with a label of their own
	rules   int             // rules labelled so far
	// noRule counts unmatched descriptors by domain label.
	noRule map[string]prometheus.Counter
}

// labelling starts the labels of a configuration of domains (in order).
func (m *Metrics) labelling(domains []string) *labelling {
	l := &labelling{m: m, pairs: map[labelPair]bool{}, domains: map[string]bool{}, noRule: map[string]prometheus.Counter{}}
	if m == nil {
		return l
	}
	// Unknown domains are counted under "", so that callers cannot grow
	// the label set; overrides under their own name.
	labels := []string{""}
	l.pairs[labelPair{"", "override"}] = true
	for i, d := range domains {
		if i == MaxRuleLabels {
			labels = append(labels, OtherLabel)
			break
		}
		l.domains[d] = true
		labels = append(labels, d)
	}
	for _, d := range labels {
		l.noRule[d] = m.decisions.WithLabelValues(d, "", outcomeNoRule)
		l.pairs[labelPair{d, ""}] = true
	}
	return l
}

// domain is a domain's label.
func (l *labelling) domain(d string) string {
	if d == "" || l.domains[d] {
		return d
	}
	return OtherLabel
}

// rule returns the counters of the next rule of the configuration.
func (l *labelling) rule(domain, name string) *ruleMetrics {
	if l.m == nil {
		return nil
	}
	p := labelPair{l.domain(domain), name}
	if l.rules >= MaxRuleLabels {
		p.rule = OtherLabel
	}
	l.rules++
	l.pairs[p] = true
	return l.m.rule(p.domain, p.rule)
}

// unmatched counts a descriptor that no rule applied to, in a domain the
// configuration knows or not.
func (l *labelling) unmatched(domain string, known bool) {
	if l == nil || l.m == nil {
		return
	}
	if !known {
		domain = ""
	}
	l.noRule[l.domain(domain)].Inc()
}

// refundRefused counts a refund asked for where refunds are off, in a
// domain the configuration knows or not, through endpoint.
func (l *labelling) refundRefused(domain string, known bool, endpoint string) {
	if l == nil || l.m == nil {
		return
	}
	if !known {
		domain = ""
	}
	l.m.refunds.WithLabelValues(l.domain(domain), endpoint).Inc()
}

// retire deletes the series of the labels that the previous configuration
// had and l does not: the rules a reload removed stop being exported.
func (m *Metrics) retire(l *labelling) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.labels {
		if !l.pairs[p] {
			m.decisions.DeletePartialMatch(prometheus.Labels{"domain": p.domain, "rule": p.rule})
			m.shadow.DeletePartialMatch(prometheus.Labels{"domain": p.domain, "rule": p.rule})
			if p.rule == "" {
				for _, v := range []*prometheus.MetricVec{m.refunds.MetricVec, m.quota.reports.MetricVec, m.quota.assignments.MetricVec, m.quota.share.MetricVec, m.quota.converge.MetricVec} {
					v.DeletePartialMatch(prometheus.Labels{"domain": p.domain})
				}
			}
		}
	}
	m.labels = l.pairs
}

func (m *Metrics) storeLatency(d time.Duration) {
	if m != nil {
		m.storeSeconds.Observe(d.Seconds())
	}
}

// storeError counts a request the store failed to decide; partly: after
// some of its descriptors had changed their keys.
func (m *Metrics) storeError(partly bool) {
	if m != nil {
		m.storeErrors.Inc()
		if partly {
			m.storePartial.Inc()
		}
	}
}

func (m *Metrics) configLoaded(gen uint64) {
	if m != nil {
		m.generation.Set(float64(gen))
		m.lastReload.SetToCurrentTime()
	}
}

// ReloadFailed counts a configuration reload refused as invalid.
func (m *Metrics) ReloadFailed() {
	if m != nil {
		m.reloadErrors.Inc()
	}
}

func (m *Metrics) panicked() {
	if m != nil {
		m.panics.Inc()
	}
}
