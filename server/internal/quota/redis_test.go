package quota

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestRedisEqualsModel steps random sequences of holders, demands and
// times on quota.lua and on State.Step: every grant is the same. It fails
// if the sequences never draw each kind of grant.
func TestRedisEqualsModel(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	seqs := 200
	if testing.Short() {
		seqs = 40
	}
	kinds := map[Kind]int{}
	for seq := range seqs {
		rng := rand.New(rand.NewPCG(uint64(seq), 2))
		r := Rule{Rate: 1 + rng.Int64N(20000), Unit: []int64{1000, 60000, 3600000}[rng.IntN(3)]}
		r.Burst = 1 + rng.Int64N(2*r.Rate)
		now := time.Now().UnixMilli()
		store := &Redis{Client: client, Now: func() time.Time { return time.UnixMilli(now) }}
		key := fmt.Sprintf("%squota:%d", prefix, seq)
		var model State
		for step := range 60 {
			now += rng.Int64N(600)
			req := Request{Holder: fmt.Sprint(rng.IntN(6)), Demand: rng.Int64N(3*r.Rate) - r.Rate/4,
				TTL: 1000 * (1 + rng.Int64N(2)), Slack: rng.Int64N(500)}
			want := model.Step(r, req, now)
			got, err := store.Step(ctx, key, r, req)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("sequence %d step %d (rule %+v, %+v at %d): Redis %+v, model %+v", seq, step, r, req, now, got, want)
			}
			kinds[got.Kind]++
		}
	}
	t.Logf("grants: %d new, %d refreshed, %d denied", kinds[New], kinds[Refresh], kinds[Deny])
	if kinds[New] == 0 || kinds[Refresh] == 0 || kinds[Deny] == 0 {
		t.Fatalf("the sequences drew %v: some kind of grant never compared", kinds)
	}
}

// TestServerClock steps on Redis's own clock: a first holder gets a new
// bucket of its start share.
func TestServerClock(t *testing.T) {
	store := &Redis{Client: redistest.Client(t)}
	r := Rule{Rate: 10000, Unit: 1000, Burst: 10000}
	g, err := store.Step(context.Background(), redistest.Prefix(t)+"quota", r, Request{Holder: "a", Demand: -1, TTL: 1000, Slack: 250})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Grant{Kind: New, Hold: Hold{Tokens: 119, Rate: StartShare(r.Rate)}}); g != want {
		t.Fatalf("first step: %+v, want %+v", g, want)
	}
}

func TestRuleCheck(t *testing.T) {
	for _, r := range []Rule{{0, 1000, 1}, {1, 0, 1}, {1, 1000, 0}, {1 << 30, 1000, 1}, {1 << 20, 86400000, 1 << 20}} {
		if err := r.Check(); err == nil {
			t.Errorf("%+v: no error", r)
		}
	}
	if err := (Rule{10000, 1000, 10000}).Check(); err != nil {
		t.Error(err)
	}
}

// TestNeverPastTheBoundOnRedis runs the simulated fleet of
// TestNeverPastTheBound on quota.lua: never past the bound.
func TestNeverPastTheBoundOnRedis(t *testing.T) {
	store := &Redis{Client: redistest.Client(t)}
	key := redistest.Prefix(t) + "quota"
	r := Rule{Rate: 10000, Unit: 1000, Burst: 10000}
	es := fleet(10000, []float64{1, 1, 1, 1, 2, 2, 4, 8})
	es[3].join, es[5].leave = 3000, 6000
	start := time.Now().UnixMilli()
	step := func(_ int, req Request, now int64) Grant {
		store.Now = func() time.Time { return time.UnixMilli(start + now) }
		g, err := store.Step(context.Background(), key, r, req)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	share, ok := run(t, 0, r, es, 12000, 1000, 250, 250, 0.05, 4000, step)
	if !ok {
		t.Fatal("past the bound")
	}
	t.Logf("the fleet admitted %.1f%% of the rate", 100*share)
}

// TestStepAll makes a round of steps over many buckets in one call, on one
// server and on a Cluster, its script first flushed: the grants are the
// model's, in order.
func TestStepAll(t *testing.T) {
	for name, client := range map[string]redis.UniversalClient{"server": redistest.Client(t), "cluster": redistest.ClusterClient(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
			if cc, ok := client.(*redis.ClusterClient); ok {
				if err := cc.ForEachMaster(ctx, flush); err != nil {
					t.Fatal(err)
				}
			} else if err := flush(ctx, client.(*redis.Client)); err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			clock := func() time.Time { return at }
			store := &Redis{Client: client, Prefix: redistest.Prefix(t), Now: clock}
			model := &Memory{Now: clock}
			r := Rule{Rate: 1000, Unit: 1000, Burst: 500}
			for round := range 3 {
				var steps []Step
				for i := range 40 {
					steps = append(steps, Step{Key: fmt.Sprint("bucket:", i%20), Rule: r,
						Request: Request{Holder: fmt.Sprint(i % 3), Demand: int64(100*round + i), TTL: 1000, Slack: 250}})
				}
				got, err := store.StepAll(ctx, steps)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := model.StepAll(ctx, steps)
				if !slices.Equal(got, want) {
					t.Fatalf("round %d: Redis %v, model %v", round, got, want)
				}
				at = at.Add(300 * time.Millisecond)
			}
		})
	}
}
