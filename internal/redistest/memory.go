package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// FillMemory writes 2 MB to the Redis of c and sets its maxmemory to
// 1 MB, so that, started with "--maxmemory-policy", "noeviction", it
// refuses every write for want of memory (OOM), however small, while it
// still answers PING and reads. Filling up to a maxmemory instead leaves
// Redis at the edge, taking small writes and refusing large ones.
func FillMemory(t testing.TB, ctx context.Context, c *redis.Client) {
	t.Helper()
	value := strings.Repeat("x", 1024)
	if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 2048 {
			p.Set(ctx, fmt.Sprintf("redistest:fill:%d", i), value, 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
}
