package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/seedscript"
)

// seedScript is the token bucket of the guide the project started from, as
// the guide describes it: the caller passes the time (seconds, as a
// float), the state is a hash read with HMGET and written back with HMSET
// on every call, allowed or not, and the key never expires. It is the
// baseline of the server-time and memory targets, so it keeps those
// properties even where ratekeeper deliberately differs.
var seedScript = redis.NewScript(seedscript.Source)

// seedLimiter runs seedScript with go-redis: Capacity tokens, refilled by
// rate tokens every interval.
type seedLimiter struct {
	client   redis.UniversalClient
	capacity string
	rate     string
	interval string // seconds
}

func newSeedLimiter(client redis.UniversalClient, capacity int64, rate float64, interval time.Duration) *seedLimiter {
	return &seedLimiter{
		client:   client,
		capacity: strconv.FormatInt(capacity, 10),
		rate:     strconv.FormatFloat(rate, 'g', -1, 64),
		interval: strconv.FormatFloat(interval.Seconds(), 'g', -1, 64),
	}
}

// allow takes one token from key's bucket, if there is one.
func (s *seedLimiter) allow(ctx context.Context, key string) (bool, error) {
	now := strconv.FormatFloat(float64(time.Now().UnixMicro())/1e6, 'f', 6, 64)
	v, err := seedScript.Run(ctx, s.client, []string{key}, s.capacity, s.rate, s.interval, now).Slice()
	if err != nil {
		return false, err
	}
	if len(v) != 2 {
		return false, fmt.Errorf("seed: unexpected reply %v", v)
	}
	allowed, ok := v[0].(int64)
	if !ok {
		return false, fmt.Errorf("seed: unexpected reply %v", v)
	}
	return allowed == 1, nil
}
