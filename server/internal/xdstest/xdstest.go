// Package xdstest runs go-control-plane's own xDS management server (its
// pkg/server/v3 over a snapshot cache, as envoyproxy/ratelimit's
// xds_sotw_integration_test.go does) on loopback for tests of the xDS
// client: Start serves, Set pushes RateLimitConfig snapshots, Stop and
// Restart take the server away and bring it back at the same address,
// and the requests it received, ACKs and NACKs, are kept for the test to
// read. NewPKI makes the certificates of an mTLS set-up.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Server is a running management server.
type Server struct {
	// Addr is its loopback host:port, the same across Restart.
	Addr string

	t     testing.TB
	tls   *tls.Config
	cache cache.SnapshotCache

	mu     sync.Mutex
	grpc   *grpc.Server
	cancel context.CancelFunc
	reqs   []*discoveryv3.DiscoveryRequest
	orders [][]string    // of the resources of each response sent, by name
	notify chan struct{} // closed and replaced at each request
}

// Start serves on a free loopback port, with tlsConf when it is not nil,
// until t ends.
func Start(t testing.TB, tlsConf *tls.Config) *Server {
	t.Helper()
	s := &Server{t: t, tls: tlsConf, cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), notify: make(chan struct{})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	s.serve(l)
	t.Cleanup(s.Stop)
	return s
}

// serve starts a gRPC server on l.
func (s *Server) serve(l net.Listener) {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	xds := serverv3.NewServer(ctx, s.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.reqs = append(s.reqs, req)
			close(s.notify)
			s.notify = make(chan struct{})
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			var names []string
			for _, r := range resp.GetResources() {
				var c rlsconfv3.RateLimitConfig
				if err := r.UnmarshalTo(&c); err == nil {
					names = append(names, c.GetName())
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			s.orders = append(s.orders, names)
		},
	})
	g := grpc.NewServer(opts...)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, xds)
	s.mu.Lock()
	s.grpc, s.cancel = g, cancel
	s.mu.Unlock()
	go g.Serve(l)
}

// Stop takes the server away: its streams end and its port is closed.
// The snapshots set stay for Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	g, cancel := s.grpc, s.cancel
	s.grpc, s.cancel = nil, nil
	s.mu.Unlock()
	if g != nil {
		cancel()
		g.Stop()
	}
}

// Restart serves again at Addr, with the snapshots set so far.
func (s *Server) Restart() {
	s.t.Helper()
	var l net.Listener
	var err error
	// The port was ours a moment ago; another process may take it, rarely.
	for range 50 {
		if l, err = net.Listen("tcp", s.Addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("xdstest: listening again at %s: %v", s.Addr, err)
	}
	s.serve(l)
}

// Set makes confs the RateLimitConfig resources of node, at version.
func (s *Server) Set(node, version string, confs ...*rlsconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(confs))
	for i, c := range confs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		s.t.Fatal(err)
	}
}

// Requests returns the requests received so far, in order, across
// restarts.
func (s *Server) Requests() []*discoveryv3.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discoveryv3.DiscoveryRequest(nil), s.reqs...)
}

// Orders returns, for each response sent so far, the names of its
// RateLimitConfig resources in the order sent.
func (s *Server) Orders() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.orders...)
}

// WaitRequest waits up to timeout for a request, received before or
// after the call, for which match is true, and returns it; nil if none
// came.
func (s *Server) WaitRequest(timeout time.Duration, match func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		s.mu.Lock()
		reqs, notify := s.reqs[seen:], s.notify
		seen = len(s.reqs)
		s.mu.Unlock()
		for _, r := range reqs {
			if match(r) {
				return r
			}
		}
		select {
		case <-notify:
		case <-deadline.C:
			return nil
		}
	}
}

// IsNACK matches a NACK.
func IsNACK(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil }

// IsACK returns a match of the ACK of version.
func IsACK(version string) func(*discoveryv3.DiscoveryRequest) bool {
	return func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetErrorDetail() == nil && r.GetVersionInfo() == version && r.GetResponseNonce() != ""
	}
}
