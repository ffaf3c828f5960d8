// Package ratelimitfield writes the rate limit header fields that httplimit
// and ratekeeper-server send, so that both write them one way:
//
//	RateLimit-Policy: "<name>";q=<quota>;w=<window seconds>, ...
//	RateLimit: "<name>";r=<remaining>;t=<seconds>, ...
//	Retry-After: <seconds>
//	X-RateLimit-Limit: <quota>
//	X-RateLimit-Remaining: <remaining>
//	X-RateLimit-Reset: <Unix epoch seconds>
//
// RateLimit-Policy and RateLimit are Lists of Structured Fields (RFC 9651)
// as draft-ietf-httpapi-ratelimit-headers-10 defines them; Retry-After is
// RFC 9110's delay-seconds; the X-RateLimit-* fields are the legacy ones
// that many clients still read, with Reset in epoch seconds as GitHub's. Every time is in whole seconds rounded up, so
// that no field invites a client back before it could pass. A new rate
// limit field is added here.
package ratelimitfield

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The names of the fields.
const (
	PolicyField     = "RateLimit-Policy"
	LimitField      = "RateLimit"
	RetryAfterField = "Retry-After"

	LegacyLimitField     = "X-RateLimit-Limit"
	LegacyRemainingField = "X-RateLimit-Remaining"
	LegacyResetField     = "X-RateLimit-Reset"
)

// A Name is a policy name written as the item of both fields: an sf-string
// of RFC 9651, made once per policy by NewName.
type Name string

// NewName writes name as an sf-string. An sf-string holds printable ASCII
// only (0x20 to 0x7e), with '"' and '\' escaped by a backslash; the draft
// wants a String or a Token, not a Display String, so every other byte
// (control characters, tabs, the UTF-8 of non-ASCII names), and '%'
// itself, is written as '%' and two lower-case hex digits, as a Display
// String encodes them: "café" is "caf%c3%a9". Distinct names stay
// distinct, and a client can decode them.
func NewName(name string) Name {
	const hex = "0123456789abcdef"
	var b strings.Builder
	b.Grow(len(name) + 2)
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '%' || c < 0x20 || c > 0x7e:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return Name(b.String())
}

// Policy is an item of RateLimit-Policy: quota requests per window, the
// window in seconds rounded up and at least 1 (the draft's w is positive).
func Policy(name Name, quota int64, window time.Duration) string {
	return string(name) + ";q=" + strconv.FormatInt(quota, 10) + ";w=" + strconv.FormatInt(max(1, Seconds(window)), 10)
}

// Limit is an item of RateLimit: the requests remaining (see Remaining),
// and t, the time until more quota is available.
func Limit(name Name, remaining float64, t time.Duration) string {
	return string(name) + ";r=" + Remaining(remaining) + ";t=" + strconv.FormatInt(Seconds(t), 10)
}

// Remaining is what remains as whole requests, for RateLimit's r and
// X-RateLimit-Remaining: rounded down (a token bucket holding 2.5 tokens
// admits 2 requests), and never below 0, not even for a key in debt.
func Remaining(r float64) string {
	if !(r > 0) {
		return "0"
	}
	return strconv.FormatInt(int64(min(math.Floor(r), 1<<62)), 10)
}

// Reset is the value of X-RateLimit-Reset for a limiter full again at t:
// Unix epoch seconds, rounded up.
func Reset(t time.Time) string {
	epoch := t.Unix()
	if t.Nanosecond() > 0 {
		epoch++
	}
	return strconv.FormatInt(epoch, 10)
}

// List joins items into one field value, as RFC 9651 serializes a List.
func List(items []string) string { return strings.Join(items, ", ") }

// RetryAfter is the value of Retry-After for a wait of d: whole seconds
// rounded up, and at least 1, so that a denial, even one whose wait is
// unknown (a store outage), never invites an immediate retry.
func RetryAfter(d time.Duration) string { return strconv.FormatInt(max(1, Seconds(d)), 10) }

// Seconds is d in whole seconds, rounded up; 0 for d <= 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// Milliseconds is d in whole milliseconds, rounded up; 0 for d <= 0.
func Milliseconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Millisecond) + 1
}
