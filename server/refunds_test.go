package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// refundsConfig has the attacks' rule, 5 a minute, a budget that charges
// count into debt, and the same two with refunds turned on for them
// alone.
const refundsConfig = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 1000, count_over_limit: true}
  - key: reserved
    rate_limit: {unit: minute, requests_per_unit: 5, refunds: true}
  - key: reserved_tokens
    rate_limit: {unit: hour, requests_per_unit: 1000, count_over_limit: true, refunds: true}
  - key: pair
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 5, refunds: true}
      - {name: per_hour, unit: hour, requests_per_unit: 100, refunds: true}
`

// hit is a request of one descriptor of domain test: its hits, taken, or
// given back (is_negative_hits, /v1/decide's mode refund).
type hit struct {
	key, value string
	hits       uint64
	refund     bool
}

// outcome is the answer to a hit: allowed, or, through /v1/decide,
// refused with 400 and this body.
type outcome struct {
	allowed bool
	refused string
}

// endpoints send hits to a service through gRPC, /json and /v1/decide,
// and read a key's remaining through /v1/decide, which shows a debt.
type endpoints struct {
	send      map[string]func(t *testing.T, h hit) outcome
	remaining func(t *testing.T, key, value string) float64
}

func newEndpoints(t *testing.T, svc *Service) endpoints {
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	t.Cleanup(srv.Close)
	decide := func(t *testing.T, h hit) (int, string, DecideResponse) {
		t.Helper()
		mode := "take"
		if h.refund {
			mode = "refund"
		}
		body := fmt.Sprintf(`{"domain":"test","descriptors":[{"entries":[{"key":%q,"value":%q}],"hits":%d,"mode":%q}]}`, h.key, h.value, h.hits, mode)
		r, err := http.Post(srv.URL+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		var out DecideResponse
		if r.StatusCode == http.StatusOK || r.StatusCode == http.StatusTooManyRequests {
			if err := json.NewDecoder(bytes.NewReader(b)).Decode(&out); err != nil || len(out.Statuses) != 1 {
				t.Fatalf("/v1/decide %d: %s", r.StatusCode, b)
			}
		}
		return r.StatusCode, string(b), out
	}
	e := endpoints{send: map[string]func(*testing.T, hit) outcome{}}
	for name, send := range transports(t, svc) {
		e.send[name] = func(t *testing.T, h hit) outcome {
			t.Helper()
			d := withHits(desc(h.key, h.value), h.hits)
			d.IsNegativeHits = h.refund
			resp := send(t, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
			return outcome{allowed: resp.GetStatuses()[0].GetCode() == rlsv3.RateLimitResponse_OK}
		}
	}
	e.send["decide"] = func(t *testing.T, h hit) outcome {
		t.Helper()
		code, body, out := decide(t, h)
		switch code {
		case http.StatusOK, http.StatusTooManyRequests:
			return outcome{allowed: out.Statuses[0].Allowed}
		case http.StatusBadRequest:
			return outcome{refused: body}
		}
		t.Fatalf("/v1/decide %d: %s", code, body)
		return outcome{}
	}
	e.remaining = func(t *testing.T, key, value string) float64 {
		t.Helper()
		code, body, out := decide(t, hit{key: key, value: value})
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("a look at %s=%s: %d %s", key, value, code, body)
		}
		return out.Statuses[0].Remaining
	}
	return e
}

// awayFromTheMinute waits, if the minute is about to end, until the next
// one starts, so that a scenario on windows of a minute runs in one.
func awayFromTheMinute(t *testing.T) {
	t.Helper()
	if left := time.Until(time.Now().Truncate(time.Minute).Add(time.Minute)); left < 5*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}
}

// refundsRefused reads ratekeeper_server_refunds_refused_total.
func refundsRefused(m *Metrics, domain, endpoint string) float64 {
	return testutil.ToFloat64(m.refunds.WithLabelValues(domain, endpoint))
}

// TestRefundsOffByDefault runs an attacker's three attacks on a rule of
// 5 a minute, through gRPC, /json and /v1/decide, on a service whose
// refunds are off, as they are by default: a victim's exhausted key is
// not given back, taking 1 then refunding 1, 50 times, gets no more than
// the limit through, and a refund of 2^32-1 does not wipe a debt of
// 99,000 that a charge left. gRPC and /json ignore is_negative_hits, as
// envoyproxy/ratelimit does, taking the hits as any request's; /v1/decide
// refuses the refund with 400. Each refund is counted.
func TestRefundsOffByDefault(t *testing.T) {
	for name, st := range stores(t) {
		m := NewMetrics(prometheus.NewRegistry())
		e := newEndpoints(t, newService(t, st, refundsConfig, Options{Metrics: m}))
		for via, send := range e.send {
			t.Run(name+"/"+via, func(t *testing.T) {
				awayFromTheMinute(t)
				awayFromTheHour(t)
				refunds, reported := 0, false
				checkRefused := func(o outcome, what string) {
					t.Helper()
					refunds++
					if via != "decide" || reported {
						return
					}
					reported = o.refused == ""
					if o.refused == "" || !strings.Contains(o.refused, `descriptors[0].mode: refund refused: refunds are off for rule "user" of domain "test"`) &&
						!strings.Contains(o.refused, `descriptors[0].mode: refund refused: refunds are off for rule "tokens" of domain "test"`) {
						t.Errorf("%s: %+v, want a 400 saying refunds are off for the rule", what, o)
					} else if !strings.Contains(o.refused, "refunds: true") || !strings.Contains(o.refused, "-refunds") {
						t.Errorf("%s: %q does not say how to turn refunds on", what, o.refused)
					}
				}

				// 1. A victim's key given back.
				victim := unique(t) + "-victim"
				for i := range 5 {
					if !send(t, hit{key: "user", value: victim, hits: 1}).allowed {
						t.Fatalf("the victim's request %d denied", i+1)
					}
				}
				checkRefused(send(t, hit{key: "user", value: victim, hits: 5, refund: true}), "a refund of 5 on the victim's key")
				if left := e.remaining(t, "user", victim); left != 0 {
					t.Errorf("the victim's key holds %v after another caller's refund, want 0", left)
				}
				if send(t, hit{key: "user", value: victim, hits: 1}).allowed {
					t.Error("the victim's 6th request allowed after another caller's refund")
				}

				// 2. Take 1, then refund 1, 50 times.
				attacker := unique(t) + "-attacker"
				allowed := 0
				for range 50 {
					if send(t, hit{key: "user", value: attacker, hits: 1}).allowed {
						allowed++
					}
					checkRefused(send(t, hit{key: "user", value: attacker, hits: 1, refund: true}), "a refund of 1")
				}
				// Ignored, each refund takes 1 as a request: 3 of the first
				// 5 hits are the takes. Refused, the takes alone count.
				want := 3
				if via == "decide" {
					want = 5
				}
				if allowed != want {
					t.Errorf("%d of 50 takes allowed, each followed by a refund; want %d on a rule of 5", allowed, want)
				}

				// 3. A debt wiped by one refund of 2^32-1.
				debtor := unique(t) + "-debtor"
				if send(t, hit{key: "tokens", value: debtor, hits: 100_000}).allowed {
					t.Fatal("a charge of 100,000 on a budget of 1000 reported as fitting")
				}
				if left := e.remaining(t, "tokens", debtor); left != -99_000 {
					t.Fatalf("the budget holds %v after a charge of 100,000, want -99000", left)
				}
				checkRefused(send(t, hit{key: "tokens", value: debtor, hits: 1<<32 - 1, refund: true}), "a refund of 2^32-1")
				// Ignored, the refund is a request of 2^32-1 hits, which a
				// rule counting over its limit charges: the debt grows.
				if left := e.remaining(t, "tokens", debtor); left > -99_000 {
					t.Errorf("the budget holds %v after a refund of 2^32-1, want the debt of 99,000 kept", left)
				}
				if send(t, hit{key: "tokens", value: debtor, hits: 1}).allowed {
					t.Error("a request allowed on a budget in debt")
				}

				if got := refundsRefused(m, "test", endpointOf(via)); got != float64(refunds) {
					t.Errorf("ratekeeper_server_refunds_refused_total{endpoint=%q} = %v, want %d", endpointOf(via), got, refunds)
				}
			})
		}
	}
}

// endpointOf is the endpoint label of a transport of newEndpoints.
func endpointOf(via string) string {
	return map[string]string{"grpc": endpointGRPC, "json": endpointJSON, "decide": endpointDecide}[via]
}

// TestRefundsOn: with refunds on, for every rule (Options.Refunds, the
// -refunds flag) or for a rule (its refunds: true), a refund gives hits
// back through gRPC, /json and /v1/decide; never above full; and at most
// what one request of the rule may take, so that one refund of 2^32-1
// takes a debt of 99,000 on a budget of 1000 to 98,000, not to nothing.
// A rule without refunds: true keeps them off beside one that has it.
func TestRefundsOn(t *testing.T) {
	for _, tc := range []struct {
		name          string
		opts          Options
		window, debts string // the rules of 5 a minute and of the budget
	}{
		{"every rule", Options{Refunds: true}, "user", "tokens"},
		{"refunds: true", Options{}, "reserved", "reserved_tokens"},
	} {
		for name, st := range stores(t) {
			m := NewMetrics(prometheus.NewRegistry())
			e := newEndpoints(t, newService(t, st, refundsConfig, Options{Refunds: tc.opts.Refunds, Metrics: m}))
			for via, send := range e.send {
				t.Run(tc.name+"/"+name+"/"+via, func(t *testing.T) {
					awayFromTheMinute(t)
					awayFromTheHour(t)
					u := unique(t)
					// Given back, never above full.
					for range 5 {
						if !send(t, hit{key: tc.window, value: u, hits: 1}).allowed {
							t.Fatal("a request of the first 5 denied")
						}
					}
					if o := send(t, hit{key: tc.window, value: u, hits: 2, refund: true}); !o.allowed {
						t.Fatalf("a refund of 2: %+v, want allowed", o)
					}
					if left := e.remaining(t, tc.window, u); left != 2 {
						t.Fatalf("%v left after a refund of 2, want 2", left)
					}
					if o := send(t, hit{key: tc.window, value: u, hits: 4, refund: true}); !o.allowed {
						t.Fatalf("a refund of 4: %+v, want allowed", o)
					}
					if left := e.remaining(t, tc.window, u); left != 5 {
						t.Fatalf("%v left after a refund of 4 with 2 left on a rule of 5, want 5: never above full", left)
					}
					for i := range 6 {
						if got := send(t, hit{key: tc.window, value: u, hits: 1}).allowed; got != (i < 5) {
							t.Fatalf("request %d after the refunds: allowed %t, want %t", i+1, got, i < 5)
						}
					}
					// Take 1, refund 1: every take passes, as the caller
					// gives back what it took.
					attacker := u + "-again"
					for i := range 50 {
						if !send(t, hit{key: tc.window, value: attacker, hits: 1}).allowed {
							t.Fatalf("take %d denied, each after a refund of 1", i+1)
						}
						send(t, hit{key: tc.window, value: attacker, hits: 1, refund: true})
					}
					// A refund gives back at most the rule's capacity.
					if send(t, hit{key: tc.debts, value: u, hits: 100_000}).allowed {
						t.Fatal("a charge of 100,000 on a budget of 1000 reported as fitting")
					}
					if o := send(t, hit{key: tc.debts, value: u, hits: 1<<32 - 1, refund: true}); !o.allowed {
						t.Fatalf("a refund of 2^32-1: %+v, want allowed", o)
					}
					if left := e.remaining(t, tc.debts, u); left != -98_000 {
						t.Errorf("the budget holds %v after a charge of 100,000 and a refund of 2^32-1, want -98000: one refund gives back at most 1000", left)
					}
					if send(t, hit{key: tc.debts, value: u, hits: 1}).allowed {
						t.Error("a request allowed on a budget still in debt")
					}
					if tc.opts.Refunds {
						if got := refundsRefused(m, "test", endpointOf(via)); got != 0 {
							t.Errorf("%v refunds counted as refused, want 0", got)
						}
						return
					}
					// Beside a rule with refunds: true, one without keeps
					// them off.
					v := u + "-user"
					for range 5 {
						send(t, hit{key: "user", value: v, hits: 1})
					}
					o := send(t, hit{key: "user", value: v, hits: 5, refund: true})
					if left := e.remaining(t, "user", v); left != 0 || o.allowed || (via == "decide") != (o.refused != "") {
						t.Errorf("a refund on a rule without refunds: %+v, %v left; want it ignored (refused on /v1/decide), 0 left", o, left)
					}
					if got := refundsRefused(m, "test", endpointOf(via)); got != 1 {
						t.Errorf("%v refunds counted as refused, want 1", got)
					}
				})
			}
		}
	}
}

// TestRefundOfSeveralLimits: a refund on a rule of several limits gives
// back, to every limit, at most what one request of the rule may take:
// the smallest capacity.
func TestRefundOfSeveralLimits(t *testing.T) {
	awayFromTheMinute(t)
	awayFromTheHour(t)
	svc := newService(t, stores(t)["memstore"], refundsConfig, Options{})
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	t.Cleanup(srv.Close)
	u := unique(t)
	post := func(hits uint64, mode string) DecideStatus {
		t.Helper()
		body := fmt.Sprintf(`{"domain":"test","descriptors":[{"entries":[{"key":"pair","value":%q}],"hits":%d,"mode":%q}]}`, u, hits, mode)
		r, err := http.Post(srv.URL+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var out DecideResponse
		if err := json.NewDecoder(r.Body).Decode(&out); err != nil || len(out.Statuses) != 1 {
			t.Fatalf("%s of %d: %d, %v", mode, hits, r.StatusCode, err)
		}
		return out.Statuses[0]
	}
	// 50 charged: the minute's limit of 5 is 45 in debt, the hour's of
	// 100 has 50 left.
	if st := post(50, "charge"); st.Remaining != -45 || st.Limit != 5 {
		t.Fatalf("after a charge of 50: %+v, want the minute's limit binding, 45 in debt", st)
	}
	// A refund of 2^32-1 gives 5 back to each: the minute's holds -40.
	if st := post(1<<32-1, "refund"); st.Remaining != -40 || st.Limit != 5 {
		t.Errorf("after a refund of 2^32-1: %+v, want the minute's limit 40 in debt", st)
	}
}

// TestRefundsRefusedCounted: refunds on a domain the configuration does
// not know are counted under domain "", so that callers cannot grow the
// labels; a reload that removes a domain removes its series.
func TestRefundsRefusedCounted(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	svc := newService(t, stores(t)["memstore"], refundsConfig, Options{Metrics: m})
	for _, domain := range []string{"test", "nobody-knows-this-one"} {
		d := withHits(desc("user", unique(t)), 1)
		d.IsNegativeHits = true
		if _, err := svc.Decide(t.Context(), req(domain, d)); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := refundsRefused(m, "test", endpointGRPC), refundsRefused(m, "", endpointGRPC); a != 1 || b != 1 {
		t.Errorf("counted %v under the domain, %v under \"\"; want 1 and 1", a, b)
	}
	if n := testutil.CollectAndCount(m.refunds); n != 2 {
		t.Errorf("%d series, want 2", n)
	}
	if err := svc.SetConfig(loadConfig(t, "domain: other\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.refunds); n != 1 {
		t.Errorf("%d series after a reload without domain test, want 1 (unknown domains')", n)
	}
}
