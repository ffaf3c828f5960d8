package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestCapacityReported: a bucket of 100 an hour with a burst of 20 lets
// 20 through at once; /v1/decide says so beside its limit, and the
// RateLimit-Policy field's q is 20 (over the time to refill it from
// empty: one interval, since this bucket refills 100 at a time).
func TestCapacityReported(t *testing.T) {
	const yaml = "domain: test\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 20}\n"
	svc := newService(t, memstore.New(), yaml, Options{ResponseHeaders: true})
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/decide", "application/json",
		strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Statuses []map[string]any `json:"statuses"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Statuses) != 1 || out.Statuses[0]["limit"] != 100.0 || out.Statuses[0]["capacity"] != 20.0 {
		t.Errorf("/v1/decide statuses %v, want limit 100 and capacity 20", out.Statuses)
	}
	grpcResp := ask(t, svc, 1, desc("user", "v"))
	policy := ""
	for _, h := range grpcResp.GetResponseHeadersToAdd() {
		if h.GetKey() == ratelimitfield.PolicyField {
			policy = h.GetValue()
		}
	}
	if !strings.Contains(policy, ";q=20;w=3600") {
		t.Errorf("RateLimit-Policy %q, want q=20 over w=3600", policy)
	}
}
