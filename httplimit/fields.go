package httplimit

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
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
		h.Add("RateLimit-Policy", m.policyField)
		if res.Parts == nil {
			h.Add("RateLimit", rateLimitItem(m.sfNames[0], res))
		} else {
			items := make([]string, len(res.Parts))
			for i, p := range res.Parts {
				items[i] = rateLimitItem(m.sfNames[i], p)
			}
			h.Add("RateLimit", strings.Join(items, ", "))
		}
	}
	if m.style&HeadersLegacy != 0 {
		reset := now.Add(res.ResetAfter)
		epoch := reset.Unix()
		if reset.Nanosecond() > 0 {
			epoch++
		}
		h.Set("X-RateLimit-Limit", strconv.FormatInt(res.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatFloat(math.Floor(res.Remaining), 'f', 0, 64))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(epoch, 10))
	}
}

// rateLimitItem is res as an item of the RateLimit field. t is the
// draft's time until more quota is available (see Middleware).
func rateLimitItem(sfName string, res ratekeeper.Result) string {
	t := res.ResetAfter
	if !res.Allowed {
		t = res.RetryAfter
	}
	remaining := strconv.FormatFloat(math.Floor(res.Remaining), 'f', 0, 64)
	return sfName + ";r=" + remaining + ";t=" + strconv.FormatInt(ceilSeconds(t), 10)
}

// ceilSeconds rounds d up to whole seconds; negative durations count as 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// sfString renders s as a Structured Field String (RFC 9651), which holds
// printable ASCII only: other bytes become '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
