package drivertest

import (
	"fmt"
	"testing"
	"time"
)

// TestExpiryGuard: reads of now within the margin of real time pass,
// whatever now says; one past it is reported, once.
func TestExpiryGuard(t *testing.T) {
	var got []string
	errorf := func(format string, args ...any) { got = append(got, fmt.Sprintf(format, args...)) }
	fake := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := expiryGuard(errorf, func() time.Time { return fake }, 50*time.Millisecond)
	now()
	fake = fake.Add(-time.Hour) // a step back
	time.Sleep(20 * time.Millisecond)
	if now(); len(got) != 0 {
		t.Fatalf("20 ms into a margin of 50 ms reported: %q", got)
	}
	time.Sleep(40 * time.Millisecond)
	now()
	now()
	if len(got) != 1 {
		t.Fatalf("past the margin: %d reports, want 1: %q", len(got), got)
	}
}
