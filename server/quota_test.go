package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// quotaConfig has an enforced rule and three in quota mode, one of a
// limit of 0.
const quotaConfig = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: tokens
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: org
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: frozen
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
`

// quotaStep is a request of TestQuotaMode and its answer: the overall
// code, and whether each descriptor is over its limit.
type quotaStep struct {
	what string
	ds   []*ratelimitv3.RateLimitDescriptor
	over bool   // the request is OVER_LIMIT
	rem  []int  // each descriptor's limit_remaining
	viol []bool // each descriptor over its limit
}

// TestQuotaMode: a quota_mode rule over its limit denies nothing, as in
// envoy (its status is OK, with its limit and what remains), whether one
// or all of a request's quota-mode descriptors are over, and it never
// stops an enforced rule from taking; over gRPC, /json and /v1/decide
// alike, where /v1/decide reports the violation in over_limit.
func TestQuotaMode(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			awayFromTheHour(t)
			svc := newService(t, st, quotaConfig, Options{})
			srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
			t.Cleanup(srv.Close)
			for _, tname := range []string{"grpc", "json", "decide"} {
				send := transports(t, svc)[tname]
				t.Run(tname, func(t *testing.T) {
					u := unique(t)
					user, tokens, org := desc("user", u), desc("tokens", u), desc("org", u)
					steps := []quotaStep{
						{"both quotas under", []*ratelimitv3.RateLimitDescriptor{tokens, org}, false, []int{1, 9}, []bool{false, false}},
						{"both quotas under", []*ratelimitv3.RateLimitDescriptor{tokens, org}, false, []int{0, 8}, []bool{false, false}},
						// Quota-mode descriptors are decided together, all
						// or nothing: org takes nothing here.
						{"one quota over", []*ratelimitv3.RateLimitDescriptor{tokens, org}, false, []int{0, 8}, []bool{true, false}},
						{"one quota over, an enforced rule takes", []*ratelimitv3.RateLimitDescriptor{user, tokens}, false, []int{4, 0}, []bool{false, true}},
						{"every quota over, one of 0", []*ratelimitv3.RateLimitDescriptor{desc("frozen", u), tokens}, false, []int{0, 0}, []bool{true, true}},
						{"the enforced rule over", []*ratelimitv3.RateLimitDescriptor{withHits(desc("user", u), 5), org}, true, []int{4, 7}, []bool{true, false}},
					}
					for i, s := range steps {
						r := req("test", s.ds...)
						var resp *rlsv3.RateLimitResponse
						if tname == "decide" {
							out := postDecide(t, srv.URL, r)
							checkDecideQuota(t, i, s, out)
							resp = out.envoy()
						} else {
							resp = send(t, r)
						}
						if over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT; over != s.over {
							t.Fatalf("step %d, %s: %v, want over %v", i, s.what, resp, s.over)
						}
						for j, st := range resp.GetStatuses() {
							wantCode := rlsv3.RateLimitResponse_OK
							if s.viol[j] && !isQuota(s.ds[j]) {
								wantCode = rlsv3.RateLimitResponse_OVER_LIMIT
							}
							if st.GetCode() != wantCode || int(st.GetLimitRemaining()) != s.rem[j] || st.GetCurrentLimit() == nil {
								t.Fatalf("step %d, %s: status %d is %v, want %v with %d remaining and its limit", i, s.what, j, st, wantCode, s.rem[j])
							}
						}
					}
				})
			}
		})
	}
}

// isQuota reports whether a descriptor of TestQuotaMode is of a
// quota-mode rule.
func isQuota(d *ratelimitv3.RateLimitDescriptor) bool {
	return d.GetEntries()[0].GetKey() != "user"
}

// postDecide sends req to /v1/decide at url.
func postDecide(t *testing.T, url string, req *rlsv3.RateLimitRequest) DecideResponse {
	t.Helper()
	in := DecideRequest{Domain: req.GetDomain(), Hits: req.GetHitsAddend()}
	for _, d := range req.GetDescriptors() {
		dd := DecideDescriptor{}
		for _, e := range d.GetEntries() {
			dd.Entries = append(dd.Entries, DecideEntry{Key: e.GetKey(), Value: e.GetValue()})
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			dd.Hits = &v
		}
		in.Descriptors = append(in.Descriptors, dd)
	}
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.Post(url+"/v1/decide", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var out DecideResponse
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
		t.Fatalf("/v1/decide %d: %v", r.StatusCode, err)
	}
	if out.Allowed != (r.StatusCode == http.StatusOK) {
		t.Fatalf("/v1/decide answered %d for allowed %v", r.StatusCode, out.Allowed)
	}
	return out
}

// envoy is the Envoy response a DecideResponse stands for.
func (out DecideResponse) envoy() *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	if !out.Allowed {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for _, st := range out.Statuses {
		s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: uint32(max(st.Remaining, 0))}
		if !st.Allowed {
			s.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if st.Period != "" {
			s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: st.Limit}
		}
		resp.Statuses = append(resp.Statuses, s)
	}
	return resp
}

// checkDecideQuota checks what /v1/decide says of step i beyond Envoy's
// response: each quota-mode descriptor is marked so, and over_limit is
// set exactly on those over their limit, with a time to wait.
func checkDecideQuota(t *testing.T, i int, s quotaStep, out DecideResponse) {
	t.Helper()
	for j, st := range out.Statuses {
		quota := isQuota(s.ds[j])
		if st.QuotaMode != quota || st.OverLimit != (quota && s.viol[j]) || (st.OverLimit && st.RetryAfterMs <= 0) {
			t.Fatalf("step %d, %s: /v1/decide status %d is %+v, want quota_mode %v, over_limit %v", i, s.what, j, st, quota, quota && s.viol[j])
		}
	}
}
