package httplimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
)

// HeaderStyle selects the rate limit fields Middleware sends.
type HeaderStyle int

// Header styles, for WithHeaderStyle. Retry-After is sent on every 429
// whatever the style: it is plain HTTP, and clients rely on it.
const (
	// HeadersNone sends no rate limit fields.
	HeadersNone HeaderStyle = 0
	// HeadersIETF sends RateLimit-Policy and RateLimit, as defined by
	// draft-ietf-httpapi-ratelimit-headers-10.
	HeadersIETF HeaderStyle = 1
	// HeadersLegacy sends X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (in Unix epoch seconds).
	HeadersLegacy HeaderStyle = 2
	// HeadersBoth sends both sets; it is the default.
	HeadersBoth = HeadersIETF | HeadersLegacy
)

func (m *middleware) setFields(h http.Header, res ratekeeper.Result, now time.Time) {
	if m.style&HeadersIETF != 0 {
		h.Add(ratelimitfield.PolicyField, m.policyField)
		if res.Parts == nil {
			h.Add(ratelimitfield.LimitField, limitItem(m.names[0], res))
		} else {
			items := make([]string, len(res.Parts))
			for i, p := range res.Parts {
				items[i] = limitItem(m.names[i], p)
			}
			h.Add(ratelimitfield.LimitField, ratelimitfield.List(items))
		}
	}
	if m.style&HeadersLegacy != 0 {
		h.Set(ratelimitfield.LegacyLimitField, strconv.FormatInt(res.Limit, 10))
		h.Set(ratelimitfield.LegacyRemainingField, ratelimitfield.Remaining(res.Remaining))
		h.Set(ratelimitfield.LegacyResetField, ratelimitfield.Reset(now.Add(res.ResetAfter)))
	}
}

// limitItem is res as an item of the RateLimit field. t is the draft's
// time until more quota is available (see Middleware).
func limitItem(name ratelimitfield.Name, res ratekeeper.Result) string {
	t := res.ResetAfter
	if !res.Allowed {
		t = res.RetryAfter
	}
	return ratelimitfield.Limit(name, res.Remaining, t)
}
