package driver_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// specOf is p's ValidSpec, as a Limiter gives it to its store.
func specOf(t *testing.T, p ratekeeper.Policy) *driver.ValidSpec {
	t.Helper()
	lim, err := ratekeeper.New(newMapStore(time.Now), p)
	if err != nil {
		t.Fatal(err)
	}
	return lim.Spec()
}

// errorIs fails t unless err matches each of is and none of isnt.
func errorIs(t *testing.T, what string, err error, is []error, isnt ...error) {
	t.Helper()
	for _, want := range is {
		if !errors.Is(err, want) {
			t.Errorf("%s = %v; want an error matching %v", what, err, want)
		}
	}
	for _, not := range isnt {
		if errors.Is(err, not) {
			t.Errorf("%s = %v, which should not match %v", what, err, not)
		}
	}
}

func TestCheckKey(t *testing.T) {
	for _, key := range []string{"k", strings.Repeat("k", driver.MaxKeyLen), "{}\x00 é"} {
		if err := driver.CheckKey(key); err != nil {
			t.Errorf("CheckKey(key of %d bytes) = %v", len(key), err)
		}
	}
	errorIs(t, "CheckKey(\"\")", driver.CheckKey(""), []error{driver.ErrInvalidKey})
	errorIs(t, "CheckKey(513 bytes)", driver.CheckKey(strings.Repeat("k", driver.MaxKeyLen+1)), []error{driver.ErrInvalidKey})
	if err := driver.CheckKey(""); err.Error() != "ratekeeper: invalid key: empty key" {
		t.Errorf("CheckKey(\"\") says %q", err)
	}
}

func TestCheckCost(t *testing.T) {
	spec := specOf(t, ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	for _, n := range []int64{0, 1, 10} {
		if err := driver.CheckCost(spec, n); err != nil {
			t.Errorf("CheckCost(%d) = %v", n, err)
		}
	}
	errorIs(t, "CheckCost(-1)", driver.CheckCost(spec, -1), []error{driver.ErrInvalidCost}, driver.ErrCostTooHigh)
	err := driver.CheckCost(spec, 11)
	errorIs(t, "CheckCost(11)", err, []error{driver.ErrInvalidCost, driver.ErrCostTooHigh})
	if want := "ratekeeper: cost 11 can never be admitted: the policy admits at most 10 at once"; err.Error() != want {
		t.Errorf("CheckCost(11) says %q, want %q", err, want)
	}
	// The root package's errors are these.
	errorIs(t, "CheckCost(11)", err, []error{ratekeeper.ErrInvalidCost, ratekeeper.ErrCostTooHigh})
	errorIs(t, "CheckKey(\"\")", driver.CheckKey(""), []error{ratekeeper.ErrInvalidKey})
}

func TestCheckSpec(t *testing.T) {
	for _, spec := range []*driver.ValidSpec{nil, new(driver.ValidSpec)} {
		err := driver.CheckSpec(spec)
		errorIs(t, "CheckSpec(unvalidated)", err, []error{driver.ErrInvalidSpec, ratekeeper.ErrInvalidPolicy})
		errorIs(t, "CheckRequest(unvalidated)", driver.CheckRequest("", spec, -1), []error{driver.ErrInvalidSpec}, driver.ErrInvalidKey)
	}
	spec := specOf(t, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 2})
	if err := driver.CheckSpec(spec); err != nil {
		t.Errorf("CheckSpec(valid) = %v", err)
	}
	// The key is checked before the cost.
	errorIs(t, "CheckRequest(\"\", -1)", driver.CheckRequest("", spec, -1), []error{driver.ErrInvalidKey}, driver.ErrInvalidCost)
	if err := driver.CheckRequest("k", spec, 2); err != nil {
		t.Errorf("CheckRequest(valid) = %v", err)
	}
}

func TestCheckRequests(t *testing.T) {
	one := specOf(t, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 2})
	var parts []ratekeeper.Policy
	for i := range driver.MaxParts {
		parts = append(parts, ratekeeper.Named(string(rune('a'+i)), ratekeeper.FixedWindow{Limit: 5, Window: time.Minute}))
	}
	eight := specOf(t, ratekeeper.All(parts...))
	req := func(spec *driver.ValidSpec, n int) []driver.Request {
		reqs := make([]driver.Request, n)
		for i := range reqs {
			reqs[i] = driver.Request{Key: "k", Spec: spec, N: 1}
		}
		return reqs
	}
	if err := driver.CheckRequests(nil); err != nil {
		t.Errorf("CheckRequests(nil) = %v", err)
	}
	if err := driver.CheckRequests(req(one, driver.MaxRequests)); err != nil {
		t.Errorf("CheckRequests(%d requests) = %v", driver.MaxRequests, err)
	}
	errorIs(t, "CheckRequests(65 requests)", driver.CheckRequests(req(one, driver.MaxRequests+1)), []error{driver.ErrTooManyRequests})
	if err := driver.CheckRequests(req(eight, driver.MaxRequestPolicies/driver.MaxParts)); err != nil {
		t.Errorf("CheckRequests(%d policies) = %v", driver.MaxRequestPolicies, err)
	}
	errorIs(t, "CheckRequests(136 policies)", driver.CheckRequests(req(eight, driver.MaxRequestPolicies/driver.MaxParts+1)), []error{driver.ErrTooManyRequests})
	bad := req(one, 3)
	bad[2].N = 3
	err := driver.CheckRequests(bad)
	errorIs(t, "CheckRequests(a cost too high)", err, []error{driver.ErrCostTooHigh})
	if !strings.HasSuffix(err.Error(), "(request 2)") {
		t.Errorf("CheckRequests(a cost too high) = %q, which does not name request 2", err)
	}
}

// TestCheckRequestsModes: a charge or a refund takes costs up to
// MaxLimit, beyond what its policy admits at once, while a take does
// not; a mode past Refund, or ChargeOver on anything but a take, is an
// error naming its request.
func TestCheckRequestsModes(t *testing.T) {
	spec := specOf(t, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 2})
	for _, tc := range []struct {
		r    driver.Request
		want string // "" for none
	}{
		{driver.Request{N: 3, Mode: driver.Charge}, ""},
		{driver.Request{N: driver.MaxLimit, Mode: driver.Refund}, ""},
		{driver.Request{N: driver.MaxLimit + 1, Mode: driver.Charge}, "the most one charge or refund takes"},
		{driver.Request{N: 3, Mode: driver.Take}, "can never be admitted"},
		{driver.Request{N: 3}, "can never be admitted"}, // Check is Take
		{driver.Request{N: 1, ChargeOver: true}, ""},
		{driver.Request{N: 1, Mode: driver.Refund, ChargeOver: true}, "ChargeOver with refund"},
		{driver.Request{N: 1, Mode: driver.Refund + 1}, "invalid mode(4)"},
	} {
		tc.r.Key, tc.r.Spec = "k", spec
		err := driver.CheckRequests([]driver.Request{{Key: "a", Spec: spec, N: 1}, tc.r})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.r, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), "(request 1)")):
			t.Errorf("%+v: %v, want an error with %q naming request 1", tc.r, err, tc.want)
		}
	}
}

func TestDecision(t *testing.T) {
	single := specOf(t, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 2})
	o := driver.Outcome{Allowed: true, Remaining: 1, ResetAfter: 5}
	if d := single.Decision([]driver.Outcome{o}); !reflect.DeepEqual(d, driver.Decision{Outcome: o}) {
		t.Errorf("Decision of one policy = %+v", d)
	}
	all := specOf(t, ratekeeper.All(
		ratekeeper.Named("a", ratekeeper.FixedWindow{Limit: 5, Window: time.Minute}),
		ratekeeper.Named("b", ratekeeper.FixedWindow{Limit: 5, Window: time.Hour}),
		ratekeeper.Named("c", ratekeeper.FixedWindow{Limit: 5, Window: time.Second})))
	for _, tc := range []struct {
		name    string
		parts   []driver.Outcome
		binding int
	}{
		{"allowed: the least remaining", []driver.Outcome{
			{Allowed: true, Remaining: 3, ResetAfter: 10},
			{Allowed: true, Remaining: 2, ResetAfter: 30},
			{Allowed: true, Remaining: 4, ResetAfter: 20}}, 1},
		{"allowed: the first of equals", []driver.Outcome{
			{Allowed: true, Remaining: 2, ResetAfter: 10},
			{Allowed: true, Remaining: 2, ResetAfter: 30},
			{Allowed: true, Remaining: 4, ResetAfter: 20}}, 0},
		{"denied: the one that denies for longest", []driver.Outcome{
			{Allowed: false, RetryAfter: 5, ResetAfter: 10},
			{Allowed: true, Remaining: 0, ResetAfter: 30},
			{Allowed: false, RetryAfter: 7, ResetAfter: 20}}, 2},
		{"denied: never one that allows", []driver.Outcome{
			{Allowed: true, Remaining: 0, ResetAfter: 10},
			{Allowed: false, Remaining: 1, RetryAfter: 1, ResetAfter: 30},
			{Allowed: true, Remaining: 0, ResetAfter: 20}}, 1},
		// A Charge of 2 on 2 per hour and 1 per second, burst 1: it fits
		// the window, not the burst, and the window holds the next
		// request of cost 1 back the longest.
		{"charged: the longest wait for cost 1, whatever fitted", []driver.Outcome{
			{Allowed: false, Remaining: -1_000_000, RetryAfter: 1_000_000, ResetAfter: 20},
			{Allowed: true, Remaining: 0, RetryAfter: 3_600_000_000, ResetAfter: 30},
			{Allowed: true, Remaining: 5_000_000}}, 1},
		{"equal waits: a part that denies", []driver.Outcome{
			{Allowed: true, Remaining: 0, RetryAfter: 4, ResetAfter: 10},
			{Allowed: false, Remaining: 1, RetryAfter: 4, ResetAfter: 30},
			{Allowed: true, Remaining: 0, ResetAfter: 20}}, 1},
	} {
		in := append([]driver.Outcome(nil), tc.parts...)
		d := all.Decision(in)
		want := tc.parts[tc.binding]
		want.ResetAfter = 30
		want.Allowed = tc.parts[0].Allowed && tc.parts[1].Allowed && tc.parts[2].Allowed
		if d.Binding != tc.binding || d.Outcome != want || !reflect.DeepEqual(d.Parts, tc.parts) {
			t.Errorf("%s: Decision = %+v; want binding %d, %+v", tc.name, d, tc.binding, want)
		}
		in[0].Remaining = 99 // the store's buffer, used again
		if d.Parts[0] != tc.parts[0] {
			t.Errorf("%s: Decision keeps the store's buffer", tc.name)
		}
	}
}

// TestIdentities: specs of one algorithm and name share a StateID whatever
// their limits, and differ in Key; the StateID's string is the state's
// name in stores' keys.
func TestIdentities(t *testing.T) {
	small := specOf(t, ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 2})
	large := specOf(t, ratekeeper.GCRA{Rate: 5, Period: time.Second, Burst: 9})
	named := specOf(t, ratekeeper.Named("per-second", ratekeeper.GCRA{Rate: 1, Period: time.Second, Burst: 2}))
	if small.StateID() != large.StateID() || small.Key() == large.Key() {
		t.Errorf("limits apart: StateIDs equal %t, Keys equal %t; want true, false",
			small.StateID() == large.StateID(), small.Key() == large.Key())
	}
	if small.StateID() == named.StateID() || small.Name() != "gcra" || named.Name() != "per-second" {
		t.Errorf("a name keeps a state apart: names %q, %q", small.Name(), named.Name())
	}
	for spec, want := range map[*driver.ValidSpec]string{small: "gcra", named: "gcra:per-second"} {
		if got := spec.StateID().String(); got != want {
			t.Errorf("StateID of %s = %q, want %q", spec.Name(), got, want)
		}
	}
	if got := (driver.StateID{}).String(); got != "" {
		t.Errorf("the zero StateID = %q, want \"\"", got)
	}
}
