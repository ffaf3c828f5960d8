package server

import (
	"log/slog"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
	"github.com/ratekeeper/ratekeeper/server/internal/logpace"
)

// The last stage of a request: its decided descriptors (decide.go) made
// envoy's answer, with its statuses and header fields.

// answer builds the response from the decided descriptors.
func (s *Service) answer(snap *snapshot, domain string, ds []descriptor) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	// Every request of the all-or-nothing group is denied if one is.
	// Shadow and quota-mode descriptors deny nothing, as in envoy.
	groupDenied := false
	for i := range ds {
		if r := ds[i].rule; r != nil && r.enforced() && ds[i].denied() {
			groupDenied = true
		}
	}
	for i := range ds {
		d := &ds[i]
		st := s.status(d)
		resp.Statuses[i] = st
		if d.rule == nil {
			snap.labels.unmatched(domain, snap.cfg.HasDomain(domain))
			continue
		}
		m := d.rule.metrics
		switch {
		case d.rule.cfg.Unlimited:
			m.count(outcomeUnlimited)
		case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
			m.count(outcomeOverLimit)
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		case d.quotaOver():
			// Counted over its limit, as envoy counts it, though it
			// denies nothing.
			m.count(outcomeOverLimit)
		case d.denied():
			m.count(outcomeShadowOverLimit)
		case groupDenied && d.hits > 0 && d.rule.enforced() && d.asked.Act() == driver.Take:
			// Allowed on its own, but its request was denied by another
			// descriptor: nothing was taken.
			m.count(outcomeNotTaken)
		default:
			m.count(outcomeOK)
		}
	}
	if s.opts.ResponseHeaders {
		resp.ResponseHeadersToAdd = rateLimitHeaders(resp.Statuses, ds)
	}
	if s.opts.LimitHeaders != nil {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, s.opts.LimitHeaders.fields(resp.Statuses)...)
	}
	return resp
}

// rateLimitHeaders are the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) of a response: the policy of
// every limited descriptor, and the state of the binding one (see
// bindingStatus). Each is named by its limit's name, else by its rule's
// (ds[i]'s). A policy's q is its capacity, as httplimit writes it: a
// bucket's burst, not its rate, with w the time to fill it.
func rateLimitHeaders(statuses []*rlsv3.RateLimitResponse_DescriptorStatus, ds []descriptor) []*corev3.HeaderValue {
	counts := func(i int) bool {
		l := statuses[i].GetCurrentLimit()
		return l != nil && limitPeriod(l) > 0
	}
	var policies []string
	for i, st := range statuses {
		if counts(i) {
			policies = append(policies, ds[i].rule.fieldsOf(st.GetCurrentLimit()).policy)
		}
	}
	b := bindingStatus(statuses, counts)
	if b < 0 {
		return nil
	}
	binding, bindingName := statuses[b], ds[b].rule.fieldsOf(statuses[b].GetCurrentLimit()).name
	state := ratelimitfield.Limit(bindingName,
		float64(binding.GetLimitRemaining()), binding.GetDurationUntilReset().AsDuration())
	return []*corev3.HeaderValue{
		{Key: ratelimitfield.PolicyField, Value: ratelimitfield.List(policies)},
		{Key: ratelimitfield.LimitField, Value: state},
	}
}

// denied reports whether a limited descriptor was over its limit.
func (d *descriptor) denied() bool {
	if d.rule == nil || d.rule.cfg.Unlimited {
		return false
	}
	if d.refund {
		return false // a refund asks for nothing
	}
	if d.hits == 0 {
		// A peek takes nothing, so needs nothing: it is over the limit
		// only while its key is in debt, as envoy's counter past it.
		return d.decided && d.res.Remaining < 0
	}
	if d.rule.block {
		return true
	}
	return d.decided && !d.res.Allowed
}

// quotaOver reports whether a descriptor of a quota-mode rule is over its
// limit: its status is OK, as envoy writes it, and it denies nothing.
func (d *descriptor) quotaOver() bool {
	return d.rule != nil && !d.rule.shadow && d.rule.cfg.QuotaMode && d.denied()
}

// status is one descriptor's status, as envoyproxy/ratelimit writes it:
// OVER_LIMIT only for a rule that denies (see rule.enforced).
func (s *Service) status(d *descriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
	r := d.rule
	switch {
	case r == nil:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	case r.cfg.Unlimited:
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
	}
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: r.first}
	if r.block {
		if d.hits > 0 && !d.refund && r.enforced() {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		st.DurationUntilReset = durationpb.New(s.untilWindowEnd(r.aligned))
		return st
	}
	res := d.res
	if l, ok := r.limits[res.Policy]; ok {
		st.CurrentLimit = l
	}
	st.LimitRemaining = remaining(res.Remaining)
	if d.denied() && r.enforced() {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	st.DurationUntilReset = durationpb.New(s.untilReset(r, d))
	return st
}

// untilReset is the duration_until_reset of a decided descriptor, in whole
// seconds rounded up, as envoy gives it (Envoy's X-RateLimit-Reset header
// shows its seconds): for a window aligned to its unit, the time to the
// window's end; else, when denied, the time until it could pass, and
// when allowed, until the limit is full again.
func (s *Service) untilReset(r *rule, d *descriptor) time.Duration {
	res := d.res
	t := res.ResetAfter
	if !res.Allowed && d.hits > 0 && r.aligned == 0 {
		t = res.RetryAfter
	}
	if r.aligned > 0 && t <= 0 {
		return s.untilWindowEnd(r.aligned)
	}
	return wholeSeconds(t)
}

// untilWindowEnd is the time to the end of the current window of length
// period aligned to the Unix epoch, by this server's clock (used only
// where the store reported none: a key never used in this window).
func (s *Service) untilWindowEnd(period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	now := s.opts.Clock().UnixNano()
	return wholeSeconds(period - time.Duration(now%int64(period)))
}

// wholeSeconds is d rounded up to whole seconds, as the fields show it.
func wholeSeconds(d time.Duration) time.Duration {
	return time.Duration(ratelimitfield.Seconds(d)) * time.Second
}

// remaining is a Result's Remaining as limit_remaining: whole requests.
func remaining(r float64) uint32 {
	if r <= 0 {
		return 0
	}
	return uint32(min(math.Floor(r), math.MaxUint32))
}

// answerWithout answers without the store: every limited descriptor gets
// code, with its limit; the others are answered as usual.
func (s *Service) answerWithout(ds []descriptor, code rlsv3.RateLimitResponse_Code) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))}
	for i := range ds {
		d := &ds[i]
		if d.rule == nil || d.rule.cfg.Unlimited || d.rule.block {
			resp.Statuses[i] = s.status(d)
		} else {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: d.rule.first}
		}
		if resp.Statuses[i].Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return resp
}

// errorLog logs store errors at most once a second, with how many were
// left out, so that an outage does not flood the log.
type errorLog struct{ pace logpace.Pacer }

func (l *errorLog) log(logger *slog.Logger, now time.Time, err error) {
	l.pace.Log(logger, slog.LevelError, now, "store failed", "err", err)
}

// fallbackCode is the code of limited descriptors when the store fails.
func (s *Service) fallbackCode() rlsv3.RateLimitResponse_Code {
	if s.opts.OnStoreError == FailDeny {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// LimitHeaders names the three header fields envoyproxy/ratelimit adds
// with LIMIT_RESPONSE_HEADERS_ENABLED: the limit, the remaining count and
// the seconds until reset of the descriptor closest to its limit.
type LimitHeaders struct {
	Limit     string // envoy's LIMIT_LIMIT_HEADER, RateLimit-Limit by default
	Remaining string // LIMIT_REMAINING_HEADER, RateLimit-Remaining
	Reset     string // LIMIT_RESET_HEADER, RateLimit-Reset
}

// bindingStatus returns the index of the status that a response's limit
// headers report, among those that counts: the last one over its limit,
// else the first with the least remaining, as envoyproxy/ratelimit picks;
// -1 when none counts. Both kinds of headers report the same one.
func bindingStatus(statuses []*rlsv3.RateLimitResponse_DescriptorStatus, counts func(i int) bool) int {
	b := -1
	for i, st := range statuses {
		if !counts(i) {
			continue
		}
		switch {
		case st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			b = i
		case b < 0:
			b = i
		case statuses[b].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT && st.GetLimitRemaining() < statuses[b].GetLimitRemaining():
			b = i
		}
	}
	return b
}

// fields are envoy's fields for a response: of its binding status (see
// bindingStatus); none without a limited descriptor.
func (h *LimitHeaders) fields(statuses []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	b := bindingStatus(statuses, func(i int) bool { return statuses[i].GetCurrentLimit() != nil })
	if b < 0 {
		return nil
	}
	binding := statuses[b]
	reset := ratelimitfield.Seconds(binding.GetDurationUntilReset().AsDuration())
	return []*corev3.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(binding.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(binding.GetLimitRemaining()), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}
