package measure

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

func TestDrive(t *testing.T) {
	var calls [4]atomic.Int64
	elapsed := Drive(context.Background(), 4, 50*time.Millisecond, func(g int, _ *rand.Rand) bool {
		calls[g].Add(1)
		time.Sleep(time.Millisecond)
		return g != 3 || calls[g].Load() < 2 // caller 3 stops after its second call
	})
	if elapsed < 50*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("ran %v, want about 50ms", elapsed)
	}
	for g := range 3 {
		if calls[g].Load() < 2 {
			t.Errorf("caller %d made %d calls", g, calls[g].Load())
		}
	}
	if got := calls[3].Load(); got != 2 {
		t.Errorf("caller 3 made %d calls, want 2: false stops it", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := Drive(ctx, 2, time.Hour, func(int, *rand.Rand) bool { return true }); d > 5*time.Second {
		t.Errorf("an ended context ran %v", d)
	}
}
