package testutil

import (
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func TestClock(t *testing.T) {
	start := time.Unix(1_900_000_000, 0)
	c := NewClock(start)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got := c.Elapsed(); got != 400*time.Millisecond {
		t.Fatalf("Elapsed() = %v, want 400ms", got)
	}
	c.Set(start.Add(-time.Second))
	if !c.Now().Equal(start.Add(-time.Second)) || c.Elapsed() != -time.Second {
		t.Fatalf("after Set: Now() = %v, Elapsed() = %v", c.Now(), c.Elapsed())
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	b.Write([]byte(`{"a":1}` + "\n"))
	b.Write([]byte(`{"b":"x"}` + "\n"))
	if recs := b.JSONRecords(t); len(recs) != 2 || recs[0]["a"] != 1.0 || recs[1]["b"] != "x" {
		t.Fatalf("JSONRecords() = %v", recs)
	}
	if b.Len() != len(b.String()) {
		t.Fatalf("Len() = %d, String() %q", b.Len(), b.String())
	}
}

func TestDiffResult(t *testing.T) {
	a := ratekeeper.Result{Policy: "p", Allowed: true, Limit: 3, Remaining: 2, Parts: []ratekeeper.Result{{Remaining: 1}}}
	b := a
	b.Parts = []ratekeeper.Result{{Remaining: 1}}
	if d := DiffResult(a, b); d != "" {
		t.Errorf("equal Results: %s", d)
	}
	b.Parts[0].Remaining = 0
	if DiffResult(a, b) == "" {
		t.Error("Results differing in a part compare equal")
	}
}
