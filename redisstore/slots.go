package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/driver"
)

// slotsScript runs every operation on in-flight slots (lua/slots.lua).
var slotsScript = redis.NewScript(luaFile("slots"))

var _ driver.Slots = (*Store)(nil)

// SlotKey returns the Redis key that holds key's in-flight slots under
// spec: a sorted set, in the caller's hash tag as every key of the store
// ("rk:{user:1}:cc:exports"), so that a Cluster spreads callers over its
// slots.
func (s *Store) SlotKey(key string, spec driver.SlotSpec) string {
	return s.prefix + "{" + escapeBraces(key) + "}:cc:" + spec.Name
}

// AcquireSlot gives holder one of spec.Limit slots of key for spec.TTL,
// in one script call on the server's clock, as driver.Slots says.
func (s *Store) AcquireSlot(ctx context.Context, key string, spec driver.SlotSpec, holder string) (driver.SlotGrant, error) {
	v, err := s.slotCall(ctx, "acquire", key, spec, holder)
	if err != nil {
		return driver.SlotGrant{}, err
	}
	return driver.SlotGrant{Acquired: v[0] == 1, Held: v[1], RetryAfter: v[2]}, nil
}

// RenewSlot extends holder's lease, in one script call, as driver.Slots
// says.
func (s *Store) RenewSlot(ctx context.Context, key string, spec driver.SlotSpec, holder string) (bool, error) {
	v, err := s.slotCall(ctx, "renew", key, spec, holder)
	return err == nil && v[0] == 1, err
}

// ReleaseSlot gives holder's slot back, in one script call, as
// driver.Slots says.
func (s *Store) ReleaseSlot(ctx context.Context, key string, spec driver.SlotSpec, holder string) error {
	_, err := s.slotCall(ctx, "release", key, spec, holder)
	return err
}

// slotCall checks a slot operation's input, runs it, by the end of ctx,
// and reads its reply of three integers.
func (s *Store) slotCall(ctx context.Context, op, key string, spec driver.SlotSpec, holder string) ([3]int64, error) {
	var v [3]int64
	if err := driver.CheckSlot(key, spec, holder); err != nil {
		return v, err
	}
	now, slack := "", serverClockSlack
	if s.now != nil {
		t := s.now().UnixMicro()
		if err := driver.CheckTime(t); err != nil {
			return v, fmt.Errorf("redisstore: %w", err)
		}
		now, slack = strconv.FormatInt(t, 10), suppliedClockSlack
	}
	if err := s.breaker.check(); err != nil {
		return v, fmt.Errorf("redisstore: %s slot of %q: %w", op, key, err)
	}
	keys := []string{s.SlotKey(key, spec)}
	args := []any{op, holder, spec.Limit, spec.TTL, now, slack}
	reply, err := s.runBounded(ctx, func(ctx context.Context) (any, error) {
		return slotsScript.Run(ctx, s.client, keys, args...).Result()
	})
	if err != nil {
		s.breaker.failed(err)
		return v, fmt.Errorf("redisstore: %s slot of %q: %w", op, key, err)
	}
	fields, ok := reply.([]any)
	if !ok || len(fields) != 3 {
		return v, fmt.Errorf("%w: %v", errReply, reply)
	}
	for i := range v {
		if v[i], ok = fields[i].(int64); !ok || v[i] < 0 {
			return v, fmt.Errorf("%w: %v", errReply, reply)
		}
	}
	return v, nil
}

// runBounded runs f by the end of ctx: on the caller's goroutine when
// the client honours ctx's deadline (see inline), else on its own,
// waited for until ctx ends.
func (s *Store) runBounded(ctx context.Context, f func(context.Context) (any, error)) (any, error) {
	if s.inline(ctx) {
		return f(ctx)
	}
	type result struct {
		v   any
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
