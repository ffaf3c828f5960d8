package server

import (
	"strconv"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield/fieldtest"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func TestLimitHeaders(t *testing.T) {
	names := &LimitHeaders{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}
	svc := newService(t, memstore.New(), testConfig, Options{LimitHeaders: names})
	user := unique(t)
	fields := func(hits uint32) map[string]string {
		t.Helper()
		resp := ask(t, svc, hits, desc("user", user), desc("path", "/slow"), desc("nothing", "x"))
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		return got
	}
	// user: 5 per hour, 4 left; /slow: 2 per hour, 1 left, the closest.
	got := fields(0)
	if len(got) != 3 || got["X-RateLimit-Limit"] != "2" || got["X-RateLimit-Remaining"] != "1" {
		t.Fatalf("fields %v, want /slow's: limit 2, remaining 1", got)
	}
	if reset, err := strconv.Atoi(got["X-RateLimit-Reset"]); err != nil || reset < 1 || reset > 3600 {
		t.Errorf("reset %q, want the seconds to the top of the hour", got["X-RateLimit-Reset"])
	}
	// Over /slow's limit: its fields, remaining 0.
	fields(0)
	if got := fields(0); got["X-RateLimit-Limit"] != "2" || got["X-RateLimit-Remaining"] != "0" {
		t.Errorf("over the limit: %v", got)
	}
	if resp := ask(t, svc, 0, desc("nothing", "x")); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("fields without a limit: %v", resp.ResponseHeadersToAdd)
	}
}

// TestOneBindingStatus: with two descriptors over their limits, envoy's
// limit headers and the RateLimit field report the same one, the last,
// as envoyproxy/ratelimit does.
func TestOneBindingStatus(t *testing.T) {
	const cfg = `
domain: test
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 1, name: first}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 3, name: last}
`
	names := &LimitHeaders{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining", Reset: "X-RateLimit-Reset"}
	svc := newService(t, memstore.New(), cfg, Options{ResponseHeaders: true, LimitHeaders: names})
	a, b := unique(t), unique(t)
	ask(t, svc, 1, desc("a", a), desc("b", b)) // a: 0 left; b: 2 left
	resp := ask(t, svc, 3, desc("a", a), desc("b", b))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if got["X-RateLimit-Limit"] != "3" {
		t.Errorf("envoy's headers report limit %q; want the last descriptor over its limit, b's 3", got["X-RateLimit-Limit"])
	}
	state, err := fieldtest.ParseList(got["RateLimit"])
	if err != nil || len(state) != 1 || decodeName(t, state[0]) != "last" {
		t.Errorf("RateLimit %q; want b's, named last", got["RateLimit"])
	}
}
