package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
)

// maxBody bounds a request body read by the HTTP endpoints.
const maxBody = 1 << 20

// HTTPHandler serves the service's HTTP API:
//
//	POST /json         envoyproxy/ratelimit's: a RateLimitRequest as proto
//	                   JSON in, the RateLimitResponse out; 200, or 429 when
//	                   over the limit, 400 for a malformed body
//	POST /v1/decide    the native API, for callers other than Envoy (see
//	                   DecideRequest); 200 or 429, with Retry-After
//	GET  /healthcheck  200 "OK" while serving
//	GET  /readyz       200 once a configuration is loaded and the store
//	                   answers, else 503
//
// ready reports whether the store answers; metrics, when not nil, is
// served at /metrics.
func HTTPHandler(svc *Service, ready func() error, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /json", svc.serveJSON)
	mux.HandleFunc("POST /v1/decide", svc.serveDecide)
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "OK")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !svc.Ready() {
			http.Error(w, "no configuration loaded", http.StatusServiceUnavailable)
			return
		}
		if ready != nil {
			if err := ready(); err != nil {
				http.Error(w, "store not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		io.WriteString(w, "OK")
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return Recover(mux, svc.opts.Logger, svc.opts.Metrics)
}

// serveJSON is envoyproxy/ratelimit's POST /json.
func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	req := &rlsv3.RateLimitRequest{}
	if err == nil {
		err = protojson.Unmarshal(body, req)
	}
	if err != nil {
		http.Error(w, "Bad Request", http.StatusBadRequest)
		return
	}
	resp, _, _, err := s.respond(r.Context(), req, endpointJSON, nil)
	if err != nil {
		httpError(w, err)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// httpError answers a Decide error: 400 for an invalid request, 503 when
// the store or the configuration is not there.
func httpError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, errInvalidRequest) {
		code = http.StatusBadRequest
	}
	http.Error(w, err.Error(), code)
}

// DecideRequest is the body of POST /v1/decide: a domain and its
// descriptors, as in Envoy's request, with plain JSON names.
type DecideRequest struct {
	Domain      string             `json:"domain"`
	Descriptors []DecideDescriptor `json:"descriptors"`
	// Hits is every descriptor's cost, unless it gives its own; 0 or
	// absent means 1.
	Hits uint32 `json:"hits,omitempty"`
}

// DecideDescriptor is one descriptor of a DecideRequest.
type DecideDescriptor struct {
	Entries []DecideEntry `json:"entries"`
	// Hits, when present, is this descriptor's cost; 0 only looks.
	Hits *uint64 `json:"hits,omitempty"`
	// Mode is what the descriptor does with its hits: "take" (or absent)
	// takes them if the whole request is allowed; "charge" always takes
	// them, a cost known after the fact that may go into debt; "refund"
	// gives them back, as Envoy's is_negative_hits, where refunds are on
	// for the descriptor's rule (see Options.Refunds), and is refused
	// with 400 elsewhere.
	Mode string `json:"mode,omitempty"`
}

// DecideEntry is a key and value of a descriptor.
type DecideEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// DecideResponse is the answer of POST /v1/decide.
type DecideResponse struct {
	// Allowed is false when a descriptor whose rule denies is over its
	// limit: then no descriptor took anything, but for charges and
	// refunds, and the rules that count over the limit. A rule in shadow
	// or quota mode never denies: over its limit, its status says so in
	// OverLimit, and Allowed stays true, as envoy's OK.
	Allowed bool `json:"allowed"`
	// RetryAfterMs is, when denied, the time until the request could
	// pass, in milliseconds (the longest of its descriptors').
	RetryAfterMs int64          `json:"retry_after_ms"`
	Statuses     []DecideStatus `json:"statuses"`
}

// DecideStatus is one descriptor's part of a DecideResponse.
type DecideStatus struct {
	// Allowed is false when the descriptor is over its limit and its
	// rule denies.
	Allowed bool `json:"allowed"`
	// Rule names the rule that applied; empty when none did.
	Rule string `json:"rule,omitempty"`
	// Limit is the binding limit's requests per period, Period its length
	// (a Go duration, "1m0s"); both absent without a limit.
	Limit  uint32 `json:"limit,omitempty"`
	Period string `json:"period,omitempty"`
	// Capacity is the most the binding limit lets through at once: a
	// bucket's burst (which may be below Limit), a window's Limit.
	Capacity int64 `json:"capacity,omitempty"`
	// Remaining is what a request could still take now; below zero by a
	// debt that charges left.
	Remaining    float64 `json:"remaining"`
	RetryAfterMs int64   `json:"retry_after_ms"`
	ResetAfterMs int64   `json:"reset_after_ms"`
	Unlimited    bool    `json:"unlimited,omitempty"`
	// Shadow and QuotaMode say that the rule never denies: it is in
	// shadow mode (shadow_mode, or -shadow), or in quota mode
	// (quota_mode).
	Shadow    bool `json:"shadow,omitempty"`
	QuotaMode bool `json:"quota_mode,omitempty"`
	// OverLimit reports a descriptor of such a rule over its limit, which
	// Allowed does not: what envoy's quota mode reports in its dynamic
	// metadata. RetryAfterMs is then the time until it is not.
	OverLimit bool `json:"over_limit,omitempty"`
}

// serveDecide is the native POST /v1/decide.
func (s *Service) serveDecide(w http.ResponseWriter, r *http.Request) {
	var in DecideRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		err = checkJSON(body)
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&in)
	}
	if err != nil {
		http.Error(w, "malformed request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req := &rlsv3.RateLimitRequest{Domain: in.Domain, HitsAddend: in.Hits}
	var charges []bool
	for i, d := range in.Descriptors {
		p := d.proto()
		switch d.Mode {
		case "", "take":
		case "refund":
			p.IsNegativeHits = true
		case "charge":
			if charges == nil {
				charges = make([]bool, len(in.Descriptors))
			}
			charges[i] = true
		default:
			http.Error(w, fmt.Sprintf("malformed request: descriptors[%d].mode: %q is not take, charge or refund", i, d.Mode), http.StatusBadRequest)
			return
		}
		req.Descriptors = append(req.Descriptors, p)
	}
	details, err := s.decideDetailed(r.Context(), req, charges)
	if err != nil {
		httpError(w, err)
		return
	}
	out := DecideResponse{Allowed: true, Statuses: make([]DecideStatus, len(details))}
	for i, d := range details {
		out.Statuses[i] = d
		if !d.Allowed {
			out.Allowed = false
			out.RetryAfterMs = max(out.RetryAfterMs, d.RetryAfterMs)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if !out.Allowed {
		w.Header().Set(ratelimitfield.RetryAfterField, ratelimitfield.RetryAfter(time.Duration(out.RetryAfterMs)*time.Millisecond))
		w.WriteHeader(http.StatusTooManyRequests)
	}
	json.NewEncoder(w).Encode(out)
}

// proto is the descriptor as Envoy sends it.
func (d DecideDescriptor) proto() *ratelimitv3.RateLimitDescriptor {
	out := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range d.Entries {
		out.Entries = append(out.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	if d.Hits != nil {
		out.HitsAddend = wrapperspb.UInt64(*d.Hits)
	}
	return out
}

// decideDetailed decides req and describes each descriptor's decision
// with what Envoy's response leaves out: retry and reset times. charges,
// when not nil, marks the descriptors that charge their hits.
func (s *Service) decideDetailed(ctx context.Context, req *rlsv3.RateLimitRequest, charges []bool) ([]DecideStatus, error) {
	resp, ds, fallback, err := s.respond(ctx, req, endpointDecide, charges)
	if err != nil {
		return nil, err
	}
	out := make([]DecideStatus, len(ds))
	for i := range ds {
		d, st := &ds[i], resp.Statuses[i]
		out[i] = DecideStatus{Allowed: st.Code != rlsv3.RateLimitResponse_OVER_LIMIT}
		r := d.rule
		if r == nil {
			continue
		}
		out[i].Rule = r.cfg.Name
		if r.cfg.Unlimited {
			out[i].Unlimited = true
			continue
		}
		out[i].Shadow, out[i].QuotaMode = r.shadow, r.cfg.QuotaMode
		out[i].OverLimit = !r.enforced() && d.denied()
		if l := st.GetCurrentLimit(); l != nil {
			out[i].Limit = l.GetRequestsPerUnit()
			out[i].Capacity = r.quotaOf(l).capacity
			if p := limitPeriod(l); p > 0 {
				out[i].Period = p.String()
			}
		}
		if d.decided && !fallback {
			out[i].Remaining = d.res.Remaining
			out[i].ResetAfterMs = ratelimitfield.Milliseconds(d.res.ResetAfter)
			if !out[i].Allowed || out[i].OverLimit {
				out[i].RetryAfterMs = ratelimitfield.Milliseconds(d.res.RetryAfter)
			}
		} else if r.block && (!out[i].Allowed || out[i].OverLimit) {
			out[i].RetryAfterMs = ratelimitfield.Milliseconds(st.GetDurationUntilReset().AsDuration())
		}
	}
	return out, nil
}
