package redisstore

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// TestChanged: a group of a DecideAll that came back changed its keys
// exactly as driver.MultiDecider counts them, which is what makes a
// failed DecideAll match driver.ErrPartlyApplied.
func TestChanged(t *testing.T) {
	one, err := testutil.SpecOf(ratekeeper.FixedWindow{Limit: 10, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ok := driver.Outcome{Allowed: true, Remaining: 5}
	no := driver.Outcome{Remaining: 5}
	debt := driver.Outcome{Allowed: true, Remaining: -1}
	take := func(n int64) driver.Request { return driver.Request{Key: "k", Spec: one, N: n, Mode: driver.Take} }
	for _, tc := range []struct {
		what  string
		reqs  []driver.Request
		parts []driver.Outcome
		want  bool
	}{
		{"takes all allowed", []driver.Request{take(1), take(2)}, []driver.Outcome{ok, ok}, true},
		{"takes, one denied", []driver.Request{take(1), take(20)}, []driver.Outcome{ok, no}, false},
		{"a peek", []driver.Request{take(0)}, []driver.Outcome{ok}, false},
		{"a take beside a peek in debt", []driver.Request{take(1), take(0)}, []driver.Outcome{ok, debt}, false},
		{"a take beside a peek", []driver.Request{take(1), take(0)}, []driver.Outcome{ok, ok}, true},
		{"a charge beside a denied take", []driver.Request{{Key: "k", Spec: one, N: 3, Mode: driver.Charge}, take(20)}, []driver.Outcome{ok, no}, true},
		{"a refund", []driver.Request{{Key: "k", Spec: one, N: 3, Mode: driver.Refund}}, []driver.Outcome{no}, true},
		{"a ChargeOver that did not fit", []driver.Request{{Key: "k", Spec: one, N: 20, ChargeOver: true}}, []driver.Outcome{no}, true},
		{"a ChargeOver that fitted, denied by another", []driver.Request{{Key: "k", Spec: one, N: 1, ChargeOver: true}, take(20)}, []driver.Outcome{ok, no}, false},
	} {
		group := make([]int, len(tc.reqs))
		for i := range group {
			group[i] = i
		}
		if got := changed(tc.reqs, group, tc.parts); got != tc.want {
			t.Errorf("%s: changed %v, want %v", tc.what, got, tc.want)
		}
	}
}
