package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// TestRedisFixedWindowRepairsLostExpiry checks that a key that lost its
// expiry (PERSIST, or a failover that dropped it) is not stuck with its
// old window: once the window is over, decisions are fresh again and the
// key gets an expiry again.
func TestRedisFixedWindowRepairsLostExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A minute, so that Redis's real clock cannot expire the key first.
	f := newRedisKeyFixture(t, ratekeeper.FixedWindow{Limit: 3, Window: time.Minute})
	client, clock, lim, redisKey := f.client, f.clock, f.lim, f.key
	pttl := func() time.Duration {
		t.Helper()
		d, err := client.PTTL(ctx, redisKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	check := func(what string, want ratekeeper.Result) {
		t.Helper()
		want.Limit, want.Policy = 3, lim.Name()
		if res, err := lim.Allow(ctx, "k"); err != nil || testutil.DiffResult(res, want) != "" {
			t.Fatalf("Allow %s: %+v, %v; want %+v", what, res, err, want)
		}
	}

	check("at 0", ok(2, time.Minute))
	check("at 0", ok(1, time.Minute))
	check("at 0", ok(0, time.Minute))
	if err := client.Persist(ctx, redisKey).Err(); err != nil {
		t.Fatal(err)
	}
	if d := pttl(); d != -1 {
		t.Fatalf("PTTL of %s is %v after PERSIST, want -1 (no expiry)", redisKey, d)
	}
	clock.Advance(time.Minute - us)
	check("1µs before the end of the window", denied(0, 1*us, 1*us))
	clock.Advance(us)
	check("at the end of the window", ok(2, time.Minute))
	// The script sets PX to the window plus a second of slack for the
	// supplied clock.
	if d := pttl(); d <= time.Minute-5*time.Second || d > time.Minute+time.Second {
		t.Fatalf("PTTL of %s is %v after the repair, want the window plus a second", redisKey, d)
	}
}
