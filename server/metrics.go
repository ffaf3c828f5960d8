package server

import (
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
	generation   prometheus.Gauge
	reloadErrors prometheus.Counter
	lastReload   prometheus.Gauge
	panics       prometheus.Counter
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
			Help:    "Time the store took to decide one request's descriptors.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 14),
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_server_store_errors_total",
			Help: "Requests the store failed to decide.",
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
	}
	reg.MustRegister(m.decisions, m.shadow, m.storeSeconds, m.storeErrors, m.generation, m.reloadErrors, m.lastReload, m.panics)
	return m
}

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

// unmatched counts a descriptor no rule applied to. Unknown domains are
// counted under the domain label "", so that callers cannot grow the
// label set.
func (m *Metrics) unmatched(snap *snapshot, domain string) {
	if m == nil {
		return
	}
	if !snap.cfg.HasDomain(domain) {
		domain = ""
	}
	m.decisions.WithLabelValues(domain, "", outcomeNoRule).Inc()
}

func (m *Metrics) storeLatency(d time.Duration) {
	if m != nil {
		m.storeSeconds.Observe(d.Seconds())
	}
}

func (m *Metrics) storeError() {
	if m != nil {
		m.storeErrors.Inc()
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
