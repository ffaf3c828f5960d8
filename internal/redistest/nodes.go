package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a private Redis Cluster of masters without replicas, for
// tests that kill or pause one of its nodes without disturbing the shared
// one.
type Cluster struct {
	// Masters are the nodes, in the order of the slots they serve: master
	// i of n serves slots i*16384/n up to (i+1)*16384/n - 1.
	Masters []*Server
	t       testing.TB
}

// StartCluster starts a private Redis Cluster of n masters without
// replicas, and waits until every node sees every slot served. The nodes
// run with cluster-require-full-coverage no: with one of them down, the
// others go on serving their own slots. It is stopped when t ends, and
// skipped like StartServer.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for range n {
		c.Masters = append(c.Masters, startClusterNode(t, "--cluster-require-full-coverage", "no"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	first := c.Masters[0].Client()
	var admins []*redis.Client
	for i, m := range c.Masters {
		admin := m.Client()
		admins = append(admins, admin)
		// Distinct epochs from the start, as redis-cli --cluster create
		// sets them, rather than a collision for the nodes to resolve.
		if err := admin.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("CLUSTER SET-CONFIG-EPOCH on %s: %v", m.Addr, err)
		}
		if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", i*16384/n, (i+1)*16384/n-1).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE on %s: %v", m.Addr, err)
		}
	}
	want := []string{"cluster_state:ok", "cluster_slots_assigned:16384", fmt.Sprintf("cluster_known_nodes:%d", n)}
	// A node's handshake may time out on a loaded machine: MEET again,
	// every second, until every node knows every other (or 30 s pass).
	for deadline := time.Now().Add(30 * time.Second); ; {
		for _, m := range c.Masters[1:] {
			// The bus port too: the default is the node's port + 10000.
			if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", m.port, m.busPort()).Err(); err != nil {
				t.Fatalf("CLUSTER MEET %s: %v", m.Addr, err)
			}
		}
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			formed := true
			for _, a := range admins {
				_, ok := hasInfo(a, "cluster", want)
				formed = formed && ok
			}
			if formed {
				return c
			}
		}
		if time.Now().After(deadline) {
			for _, m := range c.Masters {
				m.waitInfo("cluster", want...) // fails with the node's view
			}
			return c
		}
	}
}

// startClusterNode starts a private redis-server in cluster mode, with
// more options args. Its cluster bus gets a free port of its own: the
// default, the node's port + 10000, may be taken or past 65535.
func startClusterNode(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServer(t, func() []string {
		return append([]string{"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(freePort(t))}, args...)
	})
}

// busPort returns the port of the node's cluster bus.
func (s *Server) busPort() string {
	i := slices.Index(s.args, "--cluster-port")
	if i < 0 || i+1 == len(s.args) {
		s.t.Fatalf("redis-server at %s: not a cluster node", s.Addr)
	}
	return s.args[i+1]
}

// Addrs returns the addresses of the masters.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	return addrs
}

// Client returns a cluster client of c with the options opt (go-redis's
// defaults for a zero opt), its Addrs those of c, closed when the test
// ends.
func (c *Cluster) Client(opt redis.ClusterOptions) *redis.ClusterClient {
	opt.Addrs = c.Addrs()
	client := redis.NewClusterClient(&opt)
	c.t.Cleanup(func() { client.Close() })
	return client
}

// MasterOf returns the index in Masters of the master that serves key's
// slot, asking the first master that answers for the slot (CLUSTER
// KEYSLOT).
func (c *Cluster) MasterOf(key string) int {
	c.t.Helper()
	var err error
	for _, m := range c.Masters {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var slot int64
		slot, err = m.Client().ClusterKeySlot(ctx, key).Result()
		cancel()
		if err == nil {
			n := len(c.Masters)
			for i := range n {
				if int(slot) < (i+1)*16384/n {
					return i
				}
			}
		}
	}
	c.t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
	return -1
}
