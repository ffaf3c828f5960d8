package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/metrics"
)

func Example() {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{}) // serve it on /metrics

	store := memstore.New() // or redisstore.New(client)
	defer store.Close()
	lim, err := ratekeeper.New(m.Wrap(store), ratekeeper.TokenBucket{
		Capacity: 2, RefillRate: 1, RefillInterval: time.Hour}, ratekeeper.WithName("api"))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		lim.Allow(context.Background(), "user:123")
	}

	scrape(metricsHandler, "ratekeeper_decisions_total")
	// Output:
	// ratekeeper_decisions_total{limiter="api",outcome="allowed",policy="api"} 2
	// ratekeeper_decisions_total{limiter="api",outcome="denied",policy="api"} 1
	// ratekeeper_decisions_total{limiter="api",outcome="error",policy="api"} 0
}

// A limiter of several policies counts its decisions under the binding
// policy, and every policy that denied under policy_denials_total.
func Example_all() {
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)

	store := memstore.New()
	defer store.Close()
	lim, err := ratekeeper.New(m.Wrap(store), ratekeeper.All(
		ratekeeper.Named("burst", ratekeeper.TokenBucket{Capacity: 2, RefillRate: 1, RefillInterval: time.Minute}),
		ratekeeper.Named("hourly", ratekeeper.TokenBucket{Capacity: 3, RefillRate: 3, RefillInterval: time.Hour}),
	), ratekeeper.WithName("api"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, cost := range []int64{1, 1, 1, 2} {
		res, _ := lim.AllowN(ctx, "user:123", cost)
		var denying []string
		for _, p := range res.Parts {
			if !p.Allowed {
				denying = append(denying, p.Policy)
			}
		}
		fmt.Printf("cost %d: allowed %v, binding %s, denied by %v\n", cost, res.Allowed, res.Policy, denying)
	}

	scrape(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		"ratekeeper_decisions_total", "ratekeeper_policy_denials_total")
	// Output:
	// cost 1: allowed true, binding burst, denied by []
	// cost 1: allowed true, binding burst, denied by []
	// cost 1: allowed false, binding burst, denied by [burst]
	// cost 2: allowed false, binding hourly, denied by [burst hourly]
	// ratekeeper_decisions_total{limiter="api",outcome="allowed",policy="burst"} 2
	// ratekeeper_decisions_total{limiter="api",outcome="allowed",policy="hourly"} 0
	// ratekeeper_decisions_total{limiter="api",outcome="denied",policy="burst"} 1
	// ratekeeper_decisions_total{limiter="api",outcome="denied",policy="hourly"} 1
	// ratekeeper_decisions_total{limiter="api",outcome="error",policy="api"} 0
	// ratekeeper_policy_denials_total{limiter="api",policy="burst"} 2
	// ratekeeper_policy_denials_total{limiter="api",policy="hourly"} 1
}

// scrape prints the series of the named metrics that h serves, as
// Prometheus would read them.
func scrape(h http.Handler, names ...string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	lines := bufio.NewScanner(rec.Body)
	for lines.Scan() {
		line := lines.Text()
		for _, name := range names {
			if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
				fmt.Println(line)
			}
		}
	}
}
