package redistest

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnvCluster names the environment variable holding the addresses of the
// test Redis Cluster's masters, separated by commas.
const EnvCluster = "RATEKEEPER_REDIS_CLUSTER"

// ClusterAddrs returns the addresses of the test Redis Cluster, or skips t
// when none is set (see Skip).
func ClusterAddrs(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for _, a := range strings.Split(os.Getenv(EnvCluster), ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		Skip(t, "no test Redis Cluster: run `make test`, which starts one, or set "+EnvCluster)
	}
	return addrs
}

// ClusterClient returns a client of the test Redis Cluster, closed when t
// ends. It fails t unless every master answers.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: ClusterAddrs(t)})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var masters atomic.Int32
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		masters.Add(1)
		return m.Ping(ctx).Err()
	})
	// A node that is not part of a cluster yet lists no slots, hence no
	// masters: that is a failure too, not a vacuous success.
	if err == nil && masters.Load() == 0 {
		err = errors.New("no master serves any slot")
	}
	if err != nil {
		t.Fatalf("test Redis Cluster at %s: %v", strings.Join(c.Options().Addrs, ","), err)
	}
	return c
}
