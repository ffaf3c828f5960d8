package quotafilter

import (
	"testing"
	"time"
)

// TestPastTheBound: a burst of 10 at 10/s admits 10 at once and one more
// each 100 ms; the admission that comes 50 ms sooner is past the bound,
// and the one after it, on time again, is not.
func TestPastTheBound(t *testing.T) {
	begin := time.Unix(1_700_000_000, 0)
	var times []time.Time
	for range 10 {
		times = append(times, begin)
	}
	times = append(times, begin.Add(100*time.Millisecond), begin.Add(200*time.Millisecond))
	if n, first := PastTheBound(times, 10, begin); n != 0 || first != -1 {
		t.Errorf("within the bound: %d past it, first %d", n, first)
	}
	times = append(times, begin.Add(250*time.Millisecond), begin.Add(400*time.Millisecond))
	if n, first := PastTheBound(times, 10, begin); n != 1 || first != 12 {
		t.Errorf("one 50 ms early: %d past the bound, first %d; want 1, 12", n, first)
	}
}
