// Package testutil holds what the module's tests share: a controlled
// clock, a log buffer safe to write from several goroutines, and a
// comparison of ratekeeper Results.
package testutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// Clock is a controlled clock: time moves only when a test moves it. It
// is locked because a store may read it from its own goroutines.
type Clock struct {
	mu    sync.Mutex
	start time.Time
	now   time.Time
}

// NewClock returns a Clock that reads start until it is moved.
func NewClock(start time.Time) *Clock { return &Clock{start: start, now: start} }

// Now returns the current time; stores take it as their clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d, backwards if d is negative.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Elapsed returns how far the clock has moved from the time it was made
// with, for failure messages.
func (c *Clock) Elapsed() time.Duration { return c.Now().Sub(c.start) }

// WallDrift is how far the wall clock (which Redis reads) has moved
// against the monotonic one since start: a test that compares times on
// both is void when it is not about zero, as after a step of the wall
// clock.
func WallDrift(start time.Time) time.Duration {
	now := time.Now()
	return now.Round(0).Sub(start.Round(0)) - now.Sub(start)
}

// SyncBuffer collects output written from several goroutines, such as a
// logger's or a child process's stdout and stderr, while the test reads
// it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len returns the number of bytes written so far.
func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// JSONRecords parses what was written as JSON lines, one record a line,
// as a slog.JSONHandler writes them; a line that is not JSON fails t.
func (b *SyncBuffer) JSONRecords(t testing.TB) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var recs []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// DiffResult returns "" when got and want are equal in every field,
// Parts included, and otherwise a line naming both, for a failure
// message.
func DiffResult(got, want ratekeeper.Result) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	return fmt.Sprintf("got %+v, want %+v", got, want)
}

// WantResult fails t unless err is nil and res has the given Allowed and
// Remaining: the fields of a Result that do not depend on the clock.
func WantResult(t testing.TB, what string, res ratekeeper.Result, err error, allowed bool, remaining float64) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if res.Allowed != allowed || res.Remaining != remaining {
		t.Fatalf("%s = %+v, want Allowed %t, Remaining %g", what, res, allowed, remaining)
	}
}

// SpecOf validates p as ratekeeper.New does, with opts, and returns the
// ValidSpec a store would be given: for tests that call stores or the
// models directly.
func SpecOf(p ratekeeper.Policy, opts ...ratekeeper.Option) (*driver.ValidSpec, error) {
	lim, err := ratekeeper.New(noStore{}, p, opts...)
	if err != nil {
		return nil, err
	}
	return lim.Spec(), nil
}

// LimiterOf returns a Limiter of spec, over a store that decides
// nothing: for tests that call stores or the models directly and make
// Results of their Decisions, as the Limiter does (Limiter.ResultOf).
func LimiterOf(spec *driver.ValidSpec) *ratekeeper.Limiter {
	lim, err := ratekeeper.New(noStore{}, specPolicy{spec})
	if err != nil {
		panic(err) // spec is valid
	}
	return lim
}

// ResultOf is the Result a Limiter of spec makes of d.
func ResultOf(spec *driver.ValidSpec, d driver.Decision) (ratekeeper.Result, error) {
	return LimiterOf(spec).ResultOf(d)
}

// specPolicy is the Policy of a spec already validated.
type specPolicy struct{ spec *driver.ValidSpec }

func (p specPolicy) Spec() (driver.Spec, error) { return p.spec.Spec(), nil }

// noStore is the store of SpecOf's Limiter, which decides nothing.
type noStore struct{}

func (noStore) Decide(context.Context, string, *driver.ValidSpec, int64) (driver.Decision, error) {
	return driver.Decision{}, errors.New("testutil: SpecOf's limiter decides nothing")
}

func (noStore) Reset(context.Context, string, *driver.ValidSpec) error { return nil }

// Model is one key's state under a spec, decided by the Go models: the
// Results every store must return.
type Model struct {
	spec   *driver.ValidSpec
	lim    *ratekeeper.Limiter // makes the Results
	states [driver.MaxParts]driver.State
}

// NewModel returns a Model of a fresh key under spec.
func NewModel(spec *driver.ValidSpec) *Model { return &Model{spec: spec, lim: LimiterOf(spec)} }

// Decide decides a request of cost n at now, in microseconds, as a
// Limiter's AllowN does, and returns its Result.
func (m *Model) Decide(now, n int64) ratekeeper.Result {
	return m.DecideMode(now, n, driver.Take)
}

// DecideMode decides a request of cost n at now in mode: as a Limiter's
// AllowN does with Take, its Charge and Refund with those modes.
func (m *Model) DecideMode(now, n int64, mode driver.Mode) ratekeeper.Result {
	var sts [driver.MaxParts]*driver.State
	for i := range sts {
		sts[i] = &m.states[i]
	}
	d := m.spec.Decide(sts[:max(m.spec.NumParts(), 1)], now, n, mode)
	res, err := m.lim.ResultOf(d)
	if err != nil {
		panic(err) // the models' Decisions fit their spec
	}
	return res
}

// Lease makes the lease step req at now, as a driver.Leaser does, and
// returns the lease taken and the Result of its request.
func (m *Model) Lease(now int64, req driver.LeaseRequest) (driver.Lease, ratekeeper.Result) {
	lease, o := m.spec.Lease(&m.states[0], now, req)
	res, err := m.lim.ResultOf(driver.Decision{Outcome: o})
	if err != nil {
		panic(err) // a lease's spec is never an All
	}
	return lease, res
}

// String shows the model's states, a sliding window log's entries
// included: two Models that show alike decide alike.
func (m *Model) String() string {
	var b strings.Builder
	for _, st := range m.states[:max(m.spec.NumParts(), 1)] {
		fmt.Fprintf(&b, "%+v", st)
		if st.More != nil {
			fmt.Fprintf(&b, " %+v", st.More)
		}
		b.WriteString("; ")
	}
	return b.String()
}

// Step runs the model of spec, a spec other than an All, on st, as a
// Limiter's AllowN does, and returns its Result.
func Step(spec *driver.ValidSpec, st *driver.State, now, n int64) ratekeeper.Result {
	res, err := ResultOf(spec, driver.Decision{Outcome: spec.Step(st, now, n, driver.Take)})
	if err != nil {
		panic(err) // an All's Decision has Parts
	}
	return res
}

// NewLimiter is ratekeeper.New, which must succeed.
func NewLimiter(t testing.TB, store ratekeeper.Store, p ratekeeper.Policy) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		t.Fatalf("ratekeeper.New(%+v): %v", p, err)
	}
	return lim
}

// Forget resets keys when t ends, so that the keys of a store that keeps
// them (Redis, with long expiries) do not outlive the test.
func Forget(t testing.TB, lim *ratekeeper.Limiter, keys ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, k := range keys {
			if err := lim.Reset(ctx, k); err != nil {
				t.Errorf("reset %q: %v", k, err)
			}
		}
	})
}
