// Package redistest connects tests to the throwaway Redis that `make test`
// starts, and skips them when there is none (or, under CI=true, fails
// them); Run reports how many skipped.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvAddr names the environment variable holding the test Redis address.
const EnvAddr = "RATEKEEPER_REDIS_ADDR"

// Addr returns the address of the test Redis, or skips t when none is set
// (see Skip).
func Addr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		Skip(t, "no test Redis: run `make test`, which starts one, or set "+EnvAddr)
	}
	return addr
}

// Client returns a client of the test Redis, closed when t ends. It fails
// t if Redis does not answer.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("test Redis at %s: %v", c.Options().Addr, err)
	}
	return c
}

// Prefix returns a key prefix unique to this run of t, so tests running at
// once in one Redis never share keys.
func Prefix(t testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	return "test:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
}
