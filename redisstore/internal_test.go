package redisstore

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

func TestParseReply(t *testing.T) {
	spec, err := testutil.SpecOf(ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}

	got, err := parseReply(spec, []any{int64(0), int64(300_000), int64(700_000), int64(9_700_000)})
	want := driver.Decision{Outcome: driver.Outcome{Allowed: false, Remaining: 300_000, RetryAfter: 700_000, ResetAfter: 9_700_000}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("parseReply = %+v, %v; want %+v", got, err, want)
	}
	got, err = parseReply(spec, []any{int64(1), int64(10_000_000), int64(0), int64(0)})
	if err != nil || !got.Allowed || got.Remaining != 10*driver.Unit {
		t.Errorf("parseReply of an allowed reply = %+v, %v", got, err)
	}

	for _, reply := range []any{
		nil,
		"OK",
		int64(1),
		[]any{},
		[]any{int64(1), int64(2), int64(3)},
		[]any{int64(1), int64(2), int64(3), int64(4), int64(5)},
		[]any{int64(1), "2", int64(3), int64(4)},
		[]any{int64(1), int64(2), int64(3), nil},
		[]any{1.0, int64(2), int64(3), int64(4)},
		[]int64{1, 2, 3, 4},
	} {
		if res, err := parseReply(spec, reply); !errors.Is(err, errReply) {
			t.Errorf("parseReply(%#v) = %+v, %v; want an error wrapping errReply", reply, res, err)
		}
	}
}

func TestEscapeBraces(t *testing.T) {
	for in, want := range map[string]string{
		"":        "",
		"user:1":  "user:1",
		"{":       "%7B",
		"}":       "%7D",
		"%":       "%25",
		"{}":      "%7B%7D",
		"a{b}c":   "a%7Bb%7Dc",
		"%7D":     "%257D",
		"50%{off": "50%25%7Boff",
	} {
		if got := escapeBraces(in); got != want {
			t.Errorf("escapeBraces(%q) = %q, want %q", in, got, want)
		}
	}
}
