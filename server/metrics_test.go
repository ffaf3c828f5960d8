package server

import (
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// series counts the series of the service's per-rule metrics.
func series(t *testing.T, m *Metrics) int {
	t.Helper()
	return testutil.CollectAndCount(m.decisions) + testutil.CollectAndCount(m.shadow)
}

// TestRemovedRulesSeriesDeleted: a reload that renames a rule deletes the
// series of the old name, a hundred times over; a rule kept keeps its
// counts.
func TestRemovedRulesSeriesDeleted(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	conf := func(i int) string {
		return fmt.Sprintf("domain: test\ndescriptors:\n  - key: kept\n    rate_limit: {unit: hour, requests_per_unit: 5}\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5, name: name-%d}\n", i)
	}
	svc := newService(t, memstore.New(), conf(0), Options{Metrics: m})
	ask(t, svc, 1, desc("kept", "a"))
	first := series(t, m)
	for i := 1; i <= 100; i++ {
		if err := svc.SetConfig(loadConfig(t, conf(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := series(t, m); n != first {
		t.Errorf("%d series after 100 renames, want %d as after the first configuration", n, first)
	}
	if v := testutil.ToFloat64(m.decisions.WithLabelValues("test", "kept", outcomeOK)); v != 1 {
		t.Errorf("the kept rule's count is %v after the reloads, want 1", v)
	}
	text := gather(t, m)
	if strings.Contains(text, `rule="name-0"`) || !strings.Contains(text, `rule="name-100"`) {
		t.Errorf("want the series of name-100 only:\n%s", text)
	}
}

// TestRuleSeriesBounded: beyond MaxRuleLabels rules, rules are counted
// under OtherLabel, so that the series stay bounded whatever the size of
// the configuration; the first rules keep their own labels.
func TestRuleSeriesBounded(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	rules := MaxRuleLabels + 500
	for i := range rules {
		fmt.Fprintf(&b, "  - key: k%04d\n    rate_limit: {unit: hour, requests_per_unit: 5}\n", i)
	}
	svc := newService(t, memstore.New(), b.String(), Options{Metrics: m})
	// Per rule label: 5 outcomes and the shadow counter; plus no_rule for
	// the domain and for unknown domains.
	if n, want := series(t, m), 6*(MaxRuleLabels+1)+2; n != want {
		t.Errorf("%d series for %d rules, want %d", n, rules, want)
	}
	for _, k := range []string{"k0000", fmt.Sprintf("k%04d", rules-1)} {
		if _, err := svc.Decide(t.Context(), req("big", desc(k, "v"))); err != nil {
			t.Fatal(err)
		}
	}
	if v := testutil.ToFloat64(m.decisions.WithLabelValues("big", "k0000", outcomeOK)); v != 1 {
		t.Errorf("the first rule counted %v, want 1 under its own label", v)
	}
	if v := testutil.ToFloat64(m.decisions.WithLabelValues("big", OtherLabel, outcomeOK)); v != 1 {
		t.Errorf("the last rule counted %v under %s, want 1", v, OtherLabel)
	}
	if err := svc.SetConfig(loadConfig(t, testConfig)); err != nil {
		t.Fatal(err)
	}
	if text := gather(t, m); strings.Contains(text, `domain="big"`) {
		t.Errorf("the series of the replaced configuration remain:\n%.2000s", text)
	}
}

// gather is the text of the service's per-rule series.
func gather(t *testing.T, m *Metrics) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.decisions, m.shadow)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		for _, s := range f.GetMetric() {
			b.WriteString(f.GetName())
			for _, l := range s.GetLabel() {
				fmt.Fprintf(&b, " %s=%q", l.GetName(), l.GetValue())
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// req is a request of descriptors in domain.
func req(domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// storeObservations is how many times the store's time was observed.
func storeObservations(t *testing.T, m *Metrics) uint64 {
	t.Helper()
	var out dto.Metric
	if err := m.storeSeconds.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

// TestStoreSecondsOncePerRequest: ratekeeper_server_store_seconds is
// observed once per request that asks the store, as its help says, also
// when its enforced and shadow rules make two calls; a request that asks
// nothing of the store is not observed.
func TestStoreSecondsOncePerRequest(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	svc := newService(t, memstore.New(), testConfig, Options{Metrics: m})
	user := unique(t)
	for _, tc := range []struct {
		what string
		ds   []*ratelimitv3.RateLimitDescriptor
		want uint64
	}{
		{"an enforced rule", []*ratelimitv3.RateLimitDescriptor{desc("user", user)}, 1},
		{"a shadow rule", []*ratelimitv3.RateLimitDescriptor{desc("trial", user)}, 1},
		{"enforced and shadow rules", []*ratelimitv3.RateLimitDescriptor{desc("user", user), desc("trial", user), desc("path", "/slow")}, 1},
		{"no rule, and an unlimited one", []*ratelimitv3.RateLimitDescriptor{desc("nothing", user), desc("vip", user)}, 0},
	} {
		before := storeObservations(t, m)
		if _, err := svc.Decide(t.Context(), req("test", tc.ds...)); err != nil {
			t.Fatal(err)
		}
		if got := storeObservations(t, m) - before; got != tc.want {
			t.Errorf("%s: %d observations, want %d", tc.what, got, tc.want)
		}
	}
}
