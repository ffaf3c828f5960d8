package redisstore_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// Decide, called directly without a Limiter, rejects what a Limiter
// would: a negative cost, one above what the policy can ever admit, an
// empty or oversized key. Each is the error a Limiter gives, never an
// admission, a Lua error or a garbled reply, and nothing is written.
func TestDecideValidatesInput(t *testing.T) {
	all := ratekeeper.All(
		ratekeeper.Named("a", ratekeeper.GCRA{Rate: 1, Period: time.Hour, Burst: 3}),
		ratekeeper.Named("b", ratekeeper.FixedWindow{Limit: 5, Window: time.Hour}))
	for _, p := range append(policies[:len(policies):len(policies)], all) {
		spec := mustSpec(t, p)
		t.Run(spec.Algorithm(), func(t *testing.T) {
			for _, pipelining := range []bool{true, false} {
				prefix := redistest.Prefix(t)
				client := redistest.Client(t)
				store := redisstore.New(client, redisstore.WithKeyPrefix(prefix), redisstore.WithAutoPipelining(pipelining))
				ctx := ctxTimeout(t, 5*time.Second)
				for _, c := range []struct {
					key  string
					n    int64
					is   []error
					isnt error
				}{
					{"k", -3, []error{ratekeeper.ErrInvalidCost}, ratekeeper.ErrCostTooHigh},
					{"k", math.MinInt64, []error{ratekeeper.ErrInvalidCost}, ratekeeper.ErrCostTooHigh},
					{"k", spec.MaxCost() + 1, []error{ratekeeper.ErrInvalidCost, ratekeeper.ErrCostTooHigh}, nil},
					{"k", math.MaxInt64, []error{ratekeeper.ErrInvalidCost, ratekeeper.ErrCostTooHigh}, nil},
					{"", 1, []error{ratekeeper.ErrInvalidKey}, ratekeeper.ErrInvalidCost},
					{strings.Repeat("k", ratekeeper.MaxKeyLen+1), 1, []error{ratekeeper.ErrInvalidKey}, ratekeeper.ErrInvalidCost},
				} {
					res, err := store.Decide(ctx, c.key, spec, c.n)
					for _, want := range c.is {
						if !errors.Is(err, want) {
							t.Errorf("pipelining=%t: Decide(key of %d bytes, %d) = %+v, %v; want an error matching %v",
								pipelining, len(c.key), c.n, res, err, want)
						}
					}
					if c.isnt != nil && errors.Is(err, c.isnt) {
						t.Errorf("pipelining=%t: Decide(key of %d bytes, %d) = %v, which should not match %v",
							pipelining, len(c.key), c.n, err, c.isnt)
					}
				}
				if keys := scanKeys(ctx, t, client, prefix); len(keys) > 0 {
					t.Errorf("pipelining=%t: rejected calls wrote %v", pipelining, keys)
				}
				// The bounds themselves pass.
				for _, key := range []string{"k", strings.Repeat("k", ratekeeper.MaxKeyLen)} {
					if res, err := store.Decide(ctx, key, spec, spec.MaxCost()); err != nil || !res.Allowed {
						t.Errorf("pipelining=%t: Decide(key of %d bytes, MaxCost %d) = %+v, %v; want allowed",
							pipelining, len(key), spec.MaxCost(), res, err)
					}
				}
			}
		})
	}
}
