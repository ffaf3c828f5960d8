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

// fields are envoy's fields for a response: of the last descriptor
// over its limit, else of the first with the least remaining; none
// without a limited descriptor.
func (h *LimitHeaders) fields(statuses []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var binding *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range statuses {
		if st.GetCurrentLimit() == nil {
			continue
		}
		switch {
		case st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			binding = st
		case binding == nil:
			binding = st
		case binding.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT && st.GetLimitRemaining() < binding.GetLimitRemaining():
			binding = st
		}
	}
	if binding == nil {
		return nil
	}
	reset := ratelimitfield.Seconds(binding.GetDurationUntilReset().AsDuration())
	return []*corev3.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(binding.GetCurrentLimit().GetRequestsPerUnit()), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(binding.GetLimitRemaining()), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(reset, 10)},
	}
}
