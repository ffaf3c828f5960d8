package redistest

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a private redis-server replicating master, and waits
// until it has synchronized: it then holds master's data and answers
// every write with READONLY. It is stopped when t ends.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(master.Addr)
	if err != nil {
		t.Fatal(err)
	}
	// Redis otherwise waits 5 s for more replicas before a full sync.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := master.Client().ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r := StartServerWith(t, "--replicaof", host, port)
	r.waitInfo("replication", "master_link_status:up")
	return r
}

// StartOneNodeCluster starts a private redis-server in cluster mode that
// owns every slot (CLUSTER ADDSLOTSRANGE 0 16383): a whole Redis Cluster
// behind one address, which a plain client can use as long as each
// command's keys share a slot. It is stopped when t ends.
func StartOneNodeCluster(t testing.TB) *Server {
	t.Helper()
	s := startClusterNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	s.waitInfo("cluster", "cluster_state:ok")
	return s
}

// waitInfo waits up to 10 s for INFO section (CLUSTER INFO for "cluster")
// to hold every line of want, and fails the test if it does not.
func (s *Server) waitInfo(section string, want ...string) {
	s.t.Helper()
	c := s.Client()
	var info string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var ok bool
		if info, ok = hasInfo(c, section, want); ok {
			return
		}
	}
	s.t.Fatalf("redis-server at %s: no %q within 10 s:\n%s", s.Addr, want, info)
}

// hasInfo returns INFO section of c's server (CLUSTER INFO for
// "cluster"), and whether it holds every line of want.
func hasInfo(c *redis.Client, section string, want []string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var info string
	var err error
	if section == "cluster" {
		info, err = c.ClusterInfo(ctx).Result()
	} else {
		info, err = c.Info(ctx, section).Result()
	}
	return info, err == nil && hasLines(info, want)
}

// hasLines reports whether every line of want is a line of info.
func hasLines(info string, want []string) bool {
	lines := strings.Split(info, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	for _, w := range want {
		if !slices.Contains(lines, w) {
			return false
		}
	}
	return true
}
