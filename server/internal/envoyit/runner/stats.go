package runner

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Store answers envoy's stats (gostats names, as the tests ask for them)
// from ratekeeper-server's Prometheus metrics, read when a value is
// asked for:
//
//	ratelimit.service.config_load_success      ratekeeper_server_config_generation
//	ratelimit.service.config_load_error        ratekeeper_server_config_reload_errors_total
//	ratelimit.service.rate_limit.D.K.total_hits
//	                                           ratekeeper_server_decisions_total{domain=D,rule=K}, every outcome
//	                                           but unlimited and no_rule (descriptors: the tests' hits are 1)
//	ratelimit.service.rate_limit.D.K.over_limit  … outcome over_limit
//	ratelimit.service.rate_limit.D.K.within_limit … outcomes ok and not_taken
//	ratelimit.service.rate_limit.D.K.shadow_mode … outcome shadow_over_limit
//	ratelimit.service.rate_limit.D.K.over_limit_with_local_cache,
//	ratelimit.localcache.*                     0: there is no local cache
//
// A stat with no counterpart reads 0 and fails the test when it stops,
// naming the stat.
type Store struct {
	url string
	t   testing.TB

	mu      sync.Mutex
	unknown map[string]bool
}

// Stat is a counter or a gauge.
type Stat struct {
	store *Store
	name  string
}

// Flush does nothing: the metrics are read when a value is asked for.
func (s *Store) Flush() {}

// NewCounter returns the counter name.
func (s *Store) NewCounter(name string) Stat { return Stat{s, name} }

// NewGauge returns the gauge name.
func (s *Store) NewGauge(name string) Stat { return Stat{s, name} }

// NewCounterWithTags returns the counter name; ratekeeper-server's
// metrics have no extra tags (the tests that ask for them are exempt).
func (s *Store) NewCounterWithTags(name string, _ map[string]string) Stat { return Stat{s, name} }

// Value reads the stat from the server's metrics now.
func (st Stat) Value() uint64 {
	s := st.store
	s.t.Helper()
	const rule = "ratelimit.service.rate_limit."
	switch {
	case st.name == "ratelimit.service.config_load_success":
		return s.sum("ratekeeper_server_config_generation", nil, nil)
	case st.name == "ratelimit.service.config_load_error":
		return s.sum("ratekeeper_server_config_reload_errors_total", nil, nil)
	case strings.HasPrefix(st.name, "ratelimit.localcache."):
		return 0
	case strings.HasPrefix(st.name, rule):
		rest := strings.TrimPrefix(st.name, rule)
		domain, rest, ok1 := strings.Cut(rest, ".")
		i := strings.LastIndex(rest, ".")
		if ok1 && i > 0 {
			labels := map[string]string{"domain": domain, "rule": rest[:i]}
			switch rest[i+1:] {
			case "total_hits":
				return s.sum("ratekeeper_server_decisions_total", labels, []string{"ok", "over_limit", "shadow_over_limit", "not_taken"})
			case "over_limit":
				return s.sum("ratekeeper_server_decisions_total", labels, []string{"over_limit"})
			case "within_limit":
				return s.sum("ratekeeper_server_decisions_total", labels, []string{"ok", "not_taken"})
			case "shadow_mode":
				return s.sum("ratekeeper_server_decisions_total", labels, []string{"shadow_over_limit"})
			case "over_limit_with_local_cache":
				return 0
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unknown == nil {
		s.unknown = map[string]bool{}
	}
	s.unknown[st.name] = true
	return 0
}

// sum adds up the samples of the metric whose labels match labels and
// whose outcome is one of outcomes (any, when outcomes is nil).
func (s *Store) sum(metric string, labels map[string]string, outcomes []string) uint64 {
	s.t.Helper()
	families, err := s.scrape()
	if err != nil {
		s.t.Errorf("reading ratekeeper-server's metrics: %v", err)
		return 0
	}
	f := families[metric]
	if f == nil {
		return 0
	}
	var total float64
	for _, m := range f.GetMetric() {
		if matches(m, labels, outcomes) {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return uint64(total)
}

func matches(m *dto.Metric, labels map[string]string, outcomes []string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range labels {
		if got[k] != v {
			return false
		}
	}
	if outcomes == nil {
		return true
	}
	for _, o := range outcomes {
		if got["outcome"] == o {
			return true
		}
	}
	return false
}

// scrape reads the server's metrics.
func (s *Store) scrape() (map[string]*dto.MetricFamily, error) {
	c, cancel := ctx()
	defer cancel()
	req, err := http.NewRequestWithContext(c, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// report fails the test for each stat asked for that has no counterpart.
func (s *Store) report() {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.unknown))
	for n := range s.unknown {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.t.Errorf("envoy's stat %s has no counterpart in ratekeeper-server's metrics", n)
	}
}
