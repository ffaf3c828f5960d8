package ratelimitfield_test

import (
	"math"
	"net/url"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield/fieldtest"
)

// names are policy names that an sf-string cannot hold as they are.
var names = []string{"burst", "", "slow path", "tab\there", "café", "日本", `quo"te\back`, "50%", "%c3%a9", "nl\r\n", "\x00\x7f\xff"}

func TestNamesAreValidStrings(t *testing.T) {
	seen := map[string]string{}
	for _, name := range names {
		field := ratelimitfield.List([]string{
			ratelimitfield.Policy(ratelimitfield.NewName(name), 10, time.Minute),
			ratelimitfield.Policy(ratelimitfield.NewName("other"), 1, time.Hour),
		})
		items, err := fieldtest.ParseList(field)
		if err != nil {
			t.Errorf("name %q: invalid RateLimit-Policy %s: %v", name, field, err)
			continue
		}
		s, ok := items[0].Value.(string)
		if !ok || len(items) != 2 {
			t.Errorf("name %q: %s is not a list of two String items: %#v", name, field, items)
			continue
		}
		// Percent-decoding gives the name back, so no two names collide.
		if got, err := url.PathUnescape(s); err != nil || got != name {
			t.Errorf("name %q written as %q, decodes to %q (%v)", name, s, got, err)
		}
		if other, dup := seen[s]; dup {
			t.Errorf("names %q and %q both written %q", other, name, s)
		}
		seen[s] = name
	}
	if got := string(ratelimitfield.NewName("café")); got != `"caf%c3%a9"` {
		t.Errorf("NewName(café) = %s", got)
	}
}

func TestItems(t *testing.T) {
	n := ratelimitfield.NewName("burst")
	for _, tc := range []struct{ got, want string }{
		{ratelimitfield.Policy(n, 100, time.Minute), `"burst";q=100;w=60`},
		{ratelimitfield.Policy(n, 5, 1500*time.Millisecond), `"burst";q=5;w=2`},
		{ratelimitfield.Policy(n, 5, time.Millisecond), `"burst";q=5;w=1`},
		{ratelimitfield.Limit(n, 2.5, 1001*time.Millisecond), `"burst";r=2;t=2`},
		{ratelimitfield.Limit(n, -3, -time.Second), `"burst";r=0;t=0`},
		{ratelimitfield.Limit(n, math.Inf(1), 0), `"burst";r=4611686018427387904;t=0`},
		{ratelimitfield.List([]string{"a", "b"}), "a, b"},
		{ratelimitfield.Remaining(2.999), "2"},
		{ratelimitfield.Remaining(-0.5), "0"},
		{ratelimitfield.Remaining(math.NaN()), "0"},
		{ratelimitfield.Reset(time.Unix(1767225600, 0)), "1767225600"},
		{ratelimitfield.Reset(time.Unix(1767225600, 1)), "1767225601"},
		{ratelimitfield.RetryAfter(0), "1"},
		{ratelimitfield.RetryAfter(-time.Second), "1"},
		{ratelimitfield.RetryAfter(time.Nanosecond), "1"},
		{ratelimitfield.RetryAfter(2*time.Second + 1), "3"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}

func TestRounding(t *testing.T) {
	for _, tc := range []struct {
		d         time.Duration
		sec, msec int64
	}{
		{0, 0, 0},
		{-time.Hour, 0, 0},
		{1, 1, 1},
		{time.Millisecond, 1, 1},
		{time.Millisecond + 1, 1, 2},
		{time.Second, 1, 1000},
		{time.Second + 1, 2, 1001},
		{math.MaxInt64, 9223372037, 9223372036855},
	} {
		if got := ratelimitfield.Seconds(tc.d); got != tc.sec {
			t.Errorf("Seconds(%d) = %d, want %d", tc.d, got, tc.sec)
		}
		if got := ratelimitfield.Milliseconds(tc.d); got != tc.msec {
			t.Errorf("Milliseconds(%d) = %d, want %d", tc.d, got, tc.msec)
		}
	}
}
