package xds

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DefaultKeepaliveTime is how long a connection reads nothing before the
// client pings it: grpc-go's servers, go-control-plane's among them,
// allow a ping every 5 minutes by default (their EnforcementPolicy's
// MinTime), and answer pings more frequent than that on a stream that
// carries nothing with a GOAWAY ("too_many_pings"), which closes the
// connection.
const DefaultKeepaliveTime = 5 * time.Minute

// DefaultKeepaliveTimeout is how long the client waits for a ping's
// answer before it closes the connection.
const DefaultKeepaliveTimeout = 20 * time.Second

// DefaultStallTimeout is how long a connection may read nothing, although
// probed, before the client takes it to be frozen: 15 s, so that with
// envoy's default backoff of 10 s a frozen stream is opened again within
// 30 s.
const DefaultStallTimeout = 15 * time.Second

// activity records when a connection last read anything: a frame of the
// stream, a probe's answer, a ping's.
type activity struct{ last atomic.Int64 }

func (a *activity) touch()              { a.last.Store(time.Now().UnixNano()) }
func (a *activity) idle() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

// watchedCreds are transport credentials whose connections record their
// reads in act.
type watchedCreds struct {
	credentials.TransportCredentials
	act *activity
}

// ClientHandshake wraps the raw connection before the handshake, so that
// every byte read, the handshake's included, counts.
func (w watchedCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return w.TransportCredentials.ClientHandshake(ctx, authority, &watchedConn{Conn: raw, act: w.act})
}

// Clone keeps the wrapping.
func (w watchedCreds) Clone() credentials.TransportCredentials {
	return watchedCreds{TransportCredentials: w.TransportCredentials.Clone(), act: w.act}
}

// watchedConn records its reads.
type watchedConn struct {
	net.Conn
	act *activity
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

// watch cancels a stream whose connection has read nothing for stall,
// although probed: from stall/3 without a read it asks the server for
// its health on the same connection, an answer of any kind (Unimplemented
// from a server without the health service) showing that the connection
// still carries data. A stream that is idle because nothing changed is
// kept: the probes' answers are read. It returns when ctx ends, after
// calling frozen if it cancelled the stream.
func watch(ctx context.Context, conn *grpc.ClientConn, act *activity, stall time.Duration, frozen func()) {
	tick := time.NewTicker(max(stall/10, time.Millisecond))
	defer tick.Stop()
	var probing atomic.Bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		idle := act.idle()
		if idle >= stall {
			frozen()
			return
		}
		if idle >= stall/3 && probing.CompareAndSwap(false, true) {
			go func() {
				defer probing.Store(false)
				pctx, cancel := context.WithTimeout(ctx, stall)
				defer cancel()
				healthpb.NewHealthClient(conn).Check(pctx, &healthpb.HealthCheckRequest{})
			}()
		}
	}
}
