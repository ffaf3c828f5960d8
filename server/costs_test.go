package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// costsConfig has one rule that counts over its limit, and one that does
// not: both of 1000 an hour, as an LLM token budget.
const costsConfig = `
domain: test
descriptors:
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000, count_over_limit: true}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
`

// costStep is one request of the response-cost pattern and its answer.
type costStep struct {
	hits      uint64 // the descriptor's hits_addend: 0 checks, 900 charges
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
}

// responseCostRounds is what Envoy Gateway's cost.response and Envoy AI
// Gateway's token budgets send on one descriptor: a check at request
// time (hits_addend 0), then the tokens used once the response is done.
func responseCostRounds(counted bool) []costStep {
	if !counted {
		// A denied request takes nothing: the second charge is lost, and
		// the budget reads 100 left for ever.
		return []costStep{
			{0, rlsv3.RateLimitResponse_OK, 1000}, {900, rlsv3.RateLimitResponse_OK, 100},
			{0, rlsv3.RateLimitResponse_OK, 100}, {900, rlsv3.RateLimitResponse_OVER_LIMIT, 100},
			{0, rlsv3.RateLimitResponse_OK, 100}, {0, rlsv3.RateLimitResponse_OK, 100},
		}
	}
	// The second charge goes 800 into debt: every later check is over.
	return []costStep{
		{0, rlsv3.RateLimitResponse_OK, 1000}, {900, rlsv3.RateLimitResponse_OK, 100},
		{0, rlsv3.RateLimitResponse_OK, 100}, {900, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
		{0, rlsv3.RateLimitResponse_OVER_LIMIT, 0}, {0, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
	}
}

// transport sends a request to a service and returns its answer.
type transport func(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse

// transports are gRPC and /json, each to its own copy of svc's service.
func transports(t *testing.T, svc *Service) map[string]transport {
	conn := startGRPC(t, svc, slog.New(slog.DiscardHandler), nil)
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	t.Cleanup(srv.Close)
	return map[string]transport{
		"grpc": func(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
			t.Helper()
			resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			return resp
		},
		"json": func(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
			t.Helper()
			body, _ := protojson.Marshal(req)
			r, err := http.Post(srv.URL+"/json", "application/json", strings.NewReader(string(body)))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			b, _ := io.ReadAll(r.Body)
			resp := &rlsv3.RateLimitResponse{}
			if err := protojson.Unmarshal(b, resp); err != nil {
				t.Fatalf("/json %d: %s: %v", r.StatusCode, b, err)
			}
			if over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT; over != (r.StatusCode == http.StatusTooManyRequests) {
				t.Fatalf("/json answered %d for %v", r.StatusCode, resp.GetOverallCode())
			}
			return resp
		},
	}
}

// awayFromTheHour waits, if the hour is about to end, until the next one
// starts, so that a scenario on hourly windows runs in one window.
func awayFromTheHour(t *testing.T) {
	t.Helper()
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 3*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// TestResponseCosts runs the response-cost pattern (rule of 1000 an hour;
// rounds of a check, hits_addend 0, then a charge of 900) on every store,
// over gRPC and /json, in each way of counting a denied request's hits:
// the second charge counts (the key goes into debt, and the checks after
// it are OVER_LIMIT) with count_over_limit, -count-over-limit, and
// envoy's counting; without any of them, a denied request takes nothing.
func TestResponseCosts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		key     string
		opts    Options
		counted bool
	}{
		{"count_over_limit", "tokens", Options{}, true},
		{"without count_over_limit", "plain", Options{}, false},
		{"-count-over-limit", "plain", Options{CountOverLimit: true}, true},
		{"envoy's default", "plain", Options{DeniedHits: DeniedCountAll}, true},
		{"envoy's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "plain", Options{DeniedHits: DeniedCountOver}, true},
	} {
		for name, st := range stores(t) {
			svc := newService(t, st, costsConfig, tc.opts)
			for via, send := range transports(t, svc) {
				t.Run(fmt.Sprintf("%s/%s/%s", tc.name, name, via), func(t *testing.T) {
					awayFromTheHour(t)
					value := unique(t)
					for i, step := range responseCostRounds(tc.counted) {
						resp := send(t, &rlsv3.RateLimitRequest{Domain: "test",
							Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc(tc.key, value), step.hits)}})
						st := resp.GetStatuses()[0]
						if st.GetCode() != step.code || st.GetLimitRemaining() != step.remaining || resp.GetOverallCode() != step.code {
							t.Fatalf("step %d (hits %d): %v, want %v with %d left", i+1, step.hits, resp, step.code, step.remaining)
						}
					}
				})
			}
		}
	}
}

// TestCountOverLimitInARequestDeniedByAnother: a rule that counts over
// its limit is charged when another descriptor denies the request, while
// a rule that does not takes nothing.
func TestCountOverLimitInARequestDeniedByAnother(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			awayFromTheHour(t)
			svc := newService(t, st, costsConfig, Options{})
			u := unique(t)
			ask(t, svc, 0, withHits(desc("user", u), 5)) // user u is exhausted
			resp := ask(t, svc, 10, desc("tokens", u), desc("plain", u), desc("user", u))
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%v, want OVER_LIMIT", resp)
			}
			for _, tc := range []struct {
				key  string
				left uint32
			}{{"tokens", 990}, {"plain", 1000}} {
				if s := ask(t, svc, 0, withHits(desc(tc.key, u), 0)).Statuses[0]; s.LimitRemaining != tc.left {
					t.Errorf("%s after the denied request: %v, want %d left", tc.key, s, tc.left)
				}
			}
		})
	}
}

// TestEnvoyCounting: with envoy's default every descriptor of a denied
// request counts its hits; with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
// the descriptor over its limit counts, and the others are spared.
func TestEnvoyCounting(t *testing.T) {
	for _, tc := range []struct {
		deny       DeniedHits
		user, rest uint32 // what user and plain hold after the denial
	}{
		{DeniedCountAll, 0, 998},
		{DeniedCountOver, 0, 1000},
		{DeniedTakeNothing, 2, 1000},
	} {
		for name, st := range stores(t) {
			t.Run(tc.deny.String()+"/"+name, func(t *testing.T) {
				awayFromTheHour(t)
				svc := newService(t, st, costsConfig, Options{DeniedHits: tc.deny})
				u := unique(t)
				ask(t, svc, 3, desc("user", u))
				resp := ask(t, svc, 2, desc("plain", u), withHits(desc("user", u), 3))
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK {
					t.Fatalf("%v, want user over its limit", resp)
				}
				user := ask(t, svc, 0, withHits(desc("user", u), 0)).Statuses[0]
				plain := ask(t, svc, 0, withHits(desc("plain", u), 0)).Statuses[0]
				if user.LimitRemaining != tc.user || plain.LimitRemaining != tc.rest {
					t.Errorf("user %v, plain %v: want %d and %d left", user, plain, tc.user, tc.rest)
				}
			})
		}
	}
}

// TestNegativeHits: with refunds on, envoy's is_negative_hits gives a
// descriptor's hits back; the refund is answered OK, with what is left
// after it, and never gives more than the limit.
func TestNegativeHits(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			awayFromTheHour(t)
			svc := newService(t, st, costsConfig, Options{Refunds: true})
			u := unique(t)
			refund := func(n uint64) *ratelimitv3.RateLimitDescriptor {
				d := withHits(desc("user", u), n)
				d.IsNegativeHits = true
				return d
			}
			ask(t, svc, 5, desc("user", u))
			if s := ask(t, svc, 0, refund(2)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 2 {
				t.Fatalf("refund of 2: %v, want OK with 2 left", s)
			}
			if s := ask(t, svc, 2, desc("user", u)).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 0 {
				t.Fatalf("2 after a refund of 2: %v, want OK with 0 left", s)
			}
			// The request's hits_addend, as for any descriptor; never above
			// the limit.
			d := desc("user", u)
			d.IsNegativeHits = true
			if s := ask(t, svc, 9, d).Statuses[0]; s.Code != rlsv3.RateLimitResponse_OK || s.LimitRemaining != 5 {
				t.Fatalf("refund of 9: %v, want OK with 5 left", s)
			}
		})
	}
}

// TestDecideModes: /v1/decide's descriptor mode charges and, with
// refunds on, refunds.
func TestDecideModes(t *testing.T) {
	awayFromTheHour(t)
	svc := newService(t, stores(t)["memstore"], costsConfig, Options{Refunds: true})
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	t.Cleanup(srv.Close)
	u := unique(t)
	post := func(body string) (int, DecideResponse, string) {
		t.Helper()
		r, err := http.Post(srv.URL+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		var out DecideResponse
		json.Unmarshal(b, &out)
		return r.StatusCode, out, string(b)
	}
	one := func(mode string, hits int) string {
		return fmt.Sprintf(`{"domain":"test","descriptors":[{"entries":[{"key":"plain","value":%q}],"hits":%d,"mode":%q}]}`, u, hits, mode)
	}
	for i, step := range []struct {
		body      string
		code      int
		remaining float64
	}{
		{one("take", 900), 200, 100},
		{one("charge", 900), 429, -800}, // charged: into debt
		{one("take", 0), 429, -800},     // a look, while in debt
		{one("refund", 850), 200, 50},
		{one("", 50), 200, 0},
	} {
		code, out, raw := post(step.body)
		if code != step.code || len(out.Statuses) != 1 || out.Statuses[0].Remaining != step.remaining {
			t.Fatalf("step %d: %d %s, want %d with %v left", i+1, code, raw, step.code, step.remaining)
		}
	}
	if code, _, raw := post(one("borrow", 1)); code != 400 || !strings.Contains(raw, `descriptors[0].mode: "borrow" is not take, charge or refund`) {
		t.Errorf("mode borrow: %d %s, want 400 naming the field", code, raw)
	}
}
