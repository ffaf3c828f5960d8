// Package testutil holds what the module's tests share: a controlled
// clock, a log buffer safe to write from several goroutines, and a
// comparison of ratekeeper Results.
package testutil

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
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
