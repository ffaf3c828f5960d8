package server

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
)

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
