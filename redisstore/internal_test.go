package redisstore

import (
	"context"
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

// TestArgv: each entry script's ARGV, as its header in lua/ lists it.
func TestArgv(t *testing.T) {
	tb, err := testutil.SpecOf(ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	all, err := testutil.SpecOf(ratekeeper.All(ratekeeper.Named("a", ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second}),
		ratekeeper.Named("b", ratekeeper.FixedWindow{Limit: 5, Window: time.Minute})))
	if err != nil {
		t.Fatal(err)
	}
	p, q := tb.Params(), all.Part(1).Params()
	tbAlg, _ := scriptOf(tb)
	server, supplied := New(nil), New(nil, WithClock(time.Now))
	at := time.UnixMicro(1_700_000_000_000_000)

	one := server.call(context.Background(), tbAlg, "k", tb, 3, driver.Take, at)
	want := []any{int64(3), "", serverClockSlack, p.Capacity, p.Rate, p.Interval, p.Cost, int(driver.Take)}
	if got := one.args(); !reflect.DeepEqual(got, want) {
		t.Errorf("single.lua on the server's clock: %v, want %v", got, want)
	}
	two := supplied.call(context.Background(), tbAlg, "k", tb, 0, driver.Check, at)
	want = []any{int64(0), at.UnixMicro(), suppliedClockSlack, p.Capacity, p.Rate, p.Interval, p.Cost, int(driver.Check)}
	if got := two.args(); !reflect.DeepEqual(got, want) {
		t.Errorf("single.lua on a supplied clock: %v, want %v", got, want)
	}
	skewed := New(nil, WithClock(time.Now), WithClockSkew(90*time.Second+time.Microsecond))
	want[2] = 90_001 // rounded up to a millisecond
	if got := skewed.call(context.Background(), tbAlg, "k", tb, 0, driver.Check, at).args(); !reflect.DeepEqual(got, want) {
		t.Errorf("single.lua on a supplied clock skewed by 90 s: %v, want %v", got, want)
	}
	three := server.call(context.Background(), tbAlg, "j", tb, 1, driver.Charge, at)
	want = []any{serverClockSlack, 1, p.Capacity, p.Rate, p.Interval, p.Cost,
		int64(3), "", 1, int(driver.Take), int64(1), "", 1, int(driver.Charge)}
	if got := batchArgs([]*call{one, three}); !reflect.DeepEqual(got, want) {
		t.Errorf("batch.lua, one parameter set: %v, want %v", got, want)
	}
	// Another spec of the same algorithm is a second set; a third call
	// under the first spec shares its set.
	other, err := testutil.SpecOf(ratekeeper.TokenBucket{Capacity: 7, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o := other.Params()
	four := server.call(context.Background(), tbAlg, "i", other, 2, driver.Take, at)
	want = []any{serverClockSlack, 2, p.Capacity, p.Rate, p.Interval, p.Cost, o.Capacity, o.Rate, o.Interval, o.Cost,
		int64(3), "", 1, int(driver.Take), int64(2), "", 2, int(driver.Take), int64(1), "", 1, int(driver.Charge)}
	if got := batchArgs([]*call{one, four, three}); !reflect.DeepEqual(got, want) {
		t.Errorf("batch.lua, two parameter sets: %v, want %v", got, want)
	}
	c := supplied.call(context.Background(), allScript, "k", all, 2, driver.Refund, at)
	want = []any{at.UnixMicro(), suppliedClockSlack, int(driver.Refund), tb.Algorithm(), int64(2), p.Capacity, p.Rate, p.Interval, p.Cost,
		all.Part(1).Algorithm(), int64(2), q.Capacity, q.Rate, q.Interval, q.Cost}
	if got := c.args(); !reflect.DeepEqual(got, want) {
		t.Errorf("all.lua: %v, want %v", got, want)
	}
}
