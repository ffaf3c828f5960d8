package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield/fieldtest"
	rktest "github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// deadStore is a store whose every call fails at once.
func deadStore(t *testing.T) Store {
	t.Helper()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	return redisstore.New(dead)
}

// TestDecideDeniedByStoreFailure: with -on-store-error=deny, /v1/decide
// answers 429 with a Retry-After of at least 1 s, never 0, which would
// invite every client to retry at once during the outage.
func TestDecideDeniedByStoreFailure(t *testing.T) {
	svc := newService(t, deadStore(t), testConfig, Options{OnStoreError: FailDeny})
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/decide", "application/json",
		strings.NewReader(`{"domain":"test","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("store down, deny: %d, Retry-After %q; want 429, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// TestResponseHeadersAreStructuredFields: rule names that an sf-string
// cannot hold as they are (non-ASCII, a tab, quotes) still make valid
// RateLimit-Policy and RateLimit fields, which give the names back.
func TestResponseHeadersAreStructuredFields(t *testing.T) {
	const cfg = `
domain: test
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, name: "café"}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 2, name: "tab\there \"q\""}
  - key: "日本"
    rate_limit: {unit: second, requests_per_unit: 9}
`
	svc := newService(t, memstore.New(), cfg, Options{ResponseHeaders: true})
	resp := ask(t, svc, 0, desc("a", "1"), desc("b", "1"), desc("日本", "1"))
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	policies, err := fieldtest.ParseList(got["RateLimit-Policy"])
	if err != nil || len(policies) != 3 {
		t.Fatalf("RateLimit-Policy %s: %d items, %v", got["RateLimit-Policy"], len(policies), err)
	}
	for i, want := range []struct {
		name string
		q, w int64
	}{{"café", 5, 60}, {"tab\there \"q\"", 2, 3600}, {"日本", 9, 1}} {
		it := policies[i]
		q, _ := it.Param("q")
		w, _ := it.Param("w")
		if name := decodeName(t, it); name != want.name || q != want.q || w != want.w {
			t.Errorf("RateLimit-Policy item %d: %q;q=%v;w=%v, want %q;q=%d;w=%d", i, name, q, w, want.name, want.q, want.w)
		}
	}
	state, err := fieldtest.ParseList(got["RateLimit"])
	if err != nil || len(state) != 1 {
		t.Fatalf("RateLimit %s: %v", got["RateLimit"], err)
	}
	if name := decodeName(t, state[0]); name != "tab\there \"q\"" {
		t.Errorf("RateLimit %s names %q, want the binding rule b's", got["RateLimit"], name)
	}
}

// decodeName is the policy name of a field's item.
func decodeName(t *testing.T, it fieldtest.Item) string {
	t.Helper()
	s, ok := it.Value.(string)
	if !ok {
		t.Fatalf("item %#v is not a String", it)
	}
	name, err := url.PathUnescape(s)
	if err != nil {
		t.Fatalf("name %q: %v", s, err)
	}
	return name
}

// TestClock: the service's clock gives the end of an aligned window that
// the store knows nothing of, and paces the error log.
func TestClock(t *testing.T) {
	clk := rktest.NewClock(time.Date(2030, 1, 1, 10, 59, 30, 0, time.UTC))
	svc := newService(t, memstore.New(), testConfig, Options{Clock: clk.Now})
	if got := ask(t, svc, 0, desc("closed", "x")).Statuses[0].DurationUntilReset.AsDuration(); got != 30*time.Second {
		t.Errorf("a blocked rule 30 s before the hour: duration_until_reset %v, want 30s", got)
	}
	var logs rktest.SyncBuffer
	svc = newService(t, deadStore(t), testConfig, Options{OnStoreError: FailAllow, Clock: clk.Now,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	decide := func() {
		t.Helper()
		_, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "test",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "a")}})
		if err != nil {
			t.Fatal(err)
		}
	}
	decide()
	decide()
	clk.Advance(999 * time.Millisecond)
	decide()
	clk.Advance(time.Millisecond)
	decide()
	records := logs.JSONRecords(t)
	if len(records) != 2 || records[0]["errors_not_logged"] != 0.0 || records[1]["errors_not_logged"] != 2.0 {
		t.Fatalf("store errors logged %v, want two records, the second counting 2 left out", records)
	}
}
