package ratekeeper_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

func TestResultOf(t *testing.T) {
	one, err := testutil.SpecOf(ratekeeper.TokenBucket{Capacity: 10, RefillRate: 1, RefillInterval: time.Second}, ratekeeper.WithName("api"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := testutil.LimiterOf(one).ResultOf(driver.Decision{Outcome: driver.Outcome{Remaining: 300_000, RetryAfter: 700_000, ResetAfter: 9_700_000}})
	want := ratekeeper.Result{Policy: "api", Limit: 10, Remaining: 0.3, RetryAfter: 700 * time.Millisecond, ResetAfter: 9700 * time.Millisecond}
	if err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("ResultOf one policy = %+v, %v; want %+v", res, err, want)
	}

	all, err := testutil.SpecOf(ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute})))
	if err != nil {
		t.Fatal(err)
	}
	parts := []driver.Outcome{
		{Allowed: true, Remaining: 2 * driver.Unit, ResetAfter: 0},
		{Allowed: false, Remaining: 0, RetryAfter: 5_000_000, ResetAfter: 5_000_000},
	}
	res, err = testutil.LimiterOf(all).ResultOf(all.Decision(parts))
	wantParts := []ratekeeper.Result{
		{Policy: "second", Allowed: true, Limit: 2, Remaining: 2},
		{Policy: "minute", Limit: 10, RetryAfter: 5 * time.Second, ResetAfter: 5 * time.Second},
	}
	want = wantParts[1]
	want.Parts = wantParts
	if err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("ResultOf an All = %+v, %v; want %+v", res, err, want)
	}

	// A Decision that does not fit its spec is the store's fault: an
	// error, never a panic nor a Result made up.
	for _, tc := range []struct {
		name string
		spec *driver.ValidSpec
		d    driver.Decision
	}{
		{"an All's without parts", all, driver.Decision{Outcome: driver.Outcome{Allowed: true}}},
		{"an All's of too few parts", all, driver.Decision{Parts: parts[:1]}},
		{"an All's of too many parts", all, driver.Decision{Parts: append(parts, parts...)}},
		{"an All's binding out of range", all, driver.Decision{Binding: 2, Parts: parts}},
		{"an All's binding negative", all, driver.Decision{Binding: -1, Parts: parts}},
		{"one policy's with parts", one, driver.Decision{Parts: parts[:1]}},
	} {
		if res, err := testutil.LimiterOf(tc.spec).ResultOf(tc.d); err == nil {
			t.Errorf("ResultOf %s = %+v, want an error", tc.name, res)
		}
	}
}

// badStore answers every request with a Decision of no parts.
type badStore struct{}

func (badStore) Decide(context.Context, string, *driver.ValidSpec, int64) (driver.Decision, error) {
	return driver.Decision{Outcome: driver.Outcome{Allowed: true}}, nil
}

func (badStore) Reset(context.Context, string, *driver.ValidSpec) error { return nil }

func TestLimiterRejectsMisfitDecision(t *testing.T) {
	lim, err := ratekeeper.New(badStore{}, ratekeeper.All(
		ratekeeper.Named("a", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("b", ratekeeper.FixedWindow{Limit: 10, Window: time.Minute})))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(context.Background(), "k"); err == nil || res.Allowed {
		t.Errorf("Allow over a store whose Decision lacks the All's parts = %+v, %v; want an error", res, err)
	}
}
