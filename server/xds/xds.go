// Package xds keeps the rate limit service's configuration in step with an
// xDS management server, as envoyproxy/ratelimit does with
// CONFIG_TYPE=GRPC_XDS_SOTW, which is how Envoy Gateway configures it.
//
// A Client holds one state-of-the-world ADS stream to the server, as one
// node, subscribed to every RateLimitConfig resource (TypeURL). Each push
// is built into a configuration with config.FromXDS, validated as a file
// would be, and handed to Options.Apply (the service's SetConfig), then
// acknowledged. A push that is invalid, or that Apply refuses, is NACKed
// with the error, reported to Options.Rejected, and the configuration
// applied before it keeps serving. A stream that is lost is opened again
// after a backoff (Backoff, envoy's XDS_CLIENT_BACKOFF_*), the last
// configuration serving meanwhile. A stream whose connection stops moving
// data while it stays open counts as lost: gRPC keepalive pings it
// (KeepaliveTime), and a connection that reads nothing for StallTimeout,
// although probed, is closed.
//
//	c, err := xds.New(xds.Options{
//		Server: "envoy-gateway:18001",
//		NodeID: "envoy-ratelimit",
//		Apply:  svc.SetConfig,
//	})
//	go c.Run(ctx)
//	<-c.Received() // the first push, applied or refused
package xds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratekeeper/ratekeeper/server/config"
)

// TypeURL is the type of the resources a Client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// repeatDelay is how long a Client waits before it NACKs again a push it
// has already refused: a snapshot cache answers a NACK by sending the same
// snapshot at once, and the wait keeps that exchange from spinning.
const repeatDelay = time.Second

// Options configure a Client. Server, NodeID and Apply are required.
type Options struct {
	// Server is the management server's gRPC target, such as
	// envoy-gateway:18001 (envoy's CONFIG_GRPC_XDS_SERVER_URL).
	Server string
	// NodeID is the node the client speaks as; the server's snapshots are
	// set for it (CONFIG_GRPC_XDS_NODE_ID).
	NodeID string
	// NodeMetadata is the node's metadata, each value a string
	// (CONFIG_GRPC_XDS_NODE_METADATA, see ParseNodeMetadata).
	NodeMetadata map[string]string
	// Headers are added to the stream's request metadata
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, see ParseHeaders).
	Headers map[string]string
	// TLS returns the TLS configuration of a connection; nil connects in
	// plaintext. It is called for each connection, so that certificates
	// rotated on disk are read again (see TLSFiles).
	TLS func() (*tls.Config, error)
	// MaxRecvMsgSize bounds a push, in bytes; 0 keeps gRPC's default, 4
	// MiB (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	MaxRecvMsgSize int
	// Backoff paces the attempts to open a stream again; the zero value
	// is DefaultBackoff.
	Backoff Backoff
	// KeepaliveTime is how long the connection reads nothing before the
	// client sends it a gRPC keepalive ping; 0 means DefaultKeepaliveTime.
	// The server must allow pings that often (grpc-go's servers allow one
	// every 5 minutes unless told otherwise), or it closes the connection.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long a ping may go unanswered before the
	// connection is closed; 0 means DefaultKeepaliveTimeout.
	KeepaliveTimeout time.Duration
	// StallTimeout is how long the connection may read nothing, although
	// probed, before the stream is taken to be frozen, closed, and opened
	// again after Backoff; 0 means DefaultStallTimeout, and a negative
	// value turns the check off. A stream idle because nothing changed is
	// not frozen: the client probes the connection from StallTimeout/3
	// without a read, with a gRPC health check whose answer, whatever it
	// is, shows the connection still carries data.
	StallTimeout time.Duration
	// Apply makes a pushed configuration the service's, and logs its
	// Warnings if it will. An error refuses the push.
	Apply func(*config.Config) error
	// Rejected, if not nil, is called for each push refused, once per
	// distinct push (the reload-error metric).
	Rejected func(error)
	// Logger receives the stream's events; nil discards them.
	Logger *slog.Logger
}

// Client is an ADS client for RateLimitConfig resources. Run it once.
type Client struct {
	opts Options
	node *corev3.Node

	received     chan struct{}
	receivedOnce sync.Once
	version      atomic.Pointer[string]

	// The last push refused: its version and a digest of its resources.
	rejectedVersion string
	rejectedDigest  [32]byte
}

// New returns a Client for opts, or an error naming what opts lack.
func New(opts Options) (*Client, error) {
	switch {
	case opts.Server == "":
		return nil, errors.New("xds: no management server address")
	case opts.NodeID == "":
		return nil, errors.New("xds: no node ID")
	case opts.Apply == nil:
		return nil, errors.New("xds: no Apply function")
	}
	if err := opts.Backoff.check(); err != nil {
		return nil, err
	}
	if opts.KeepaliveTime < 0 || opts.KeepaliveTimeout < 0 {
		return nil, errors.New("xds: a keepalive interval is negative")
	}
	if opts.KeepaliveTime == 0 {
		opts.KeepaliveTime = DefaultKeepaliveTime
	}
	if opts.KeepaliveTimeout == 0 {
		opts.KeepaliveTimeout = DefaultKeepaliveTimeout
	}
	if opts.StallTimeout == 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.Backoff == (Backoff{}) {
		opts.Backoff = DefaultBackoff()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	fields := map[string]*structpb.Value{}
	for k, v := range opts.NodeMetadata {
		fields[k] = structpb.NewStringValue(v)
	}
	c := &Client{
		opts:     opts,
		node:     &corev3.Node{Id: opts.NodeID, Metadata: &structpb.Struct{Fields: fields}},
		received: make(chan struct{}),
	}
	empty := ""
	c.version.Store(&empty)
	return c, nil
}

// Received is closed once the first push has been handled, applied or
// refused: envoy's service waits for it before it serves, unless
// FORCE_START_WITHOUT_INITIAL_CONFIG is set.
func (c *Client) Received() <-chan struct{} { return c.received }

// Version returns the version of the last push applied, "" before the
// first.
func (c *Client) Version() string { return *c.version.Load() }

// Run keeps a stream to the server open until ctx ends, opening it again
// after Backoff each time it is lost. It returns nil when ctx ends.
func (c *Client) Run(ctx context.Context) error {
	attempt := 0
	for {
		start := time.Now()
		healthy, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if healthy {
			attempt = 0
		}
		wait := c.opts.Backoff.Duration(attempt)
		attempt++
		c.opts.Logger.Warn("xDS stream lost; the last configuration keeps serving",
			"server", c.opts.Server, "err", err, "after", time.Since(start).Round(time.Millisecond), "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stream runs one stream until it fails. healthy reports that the server
// sent at least one push on it.
func (c *Client) stream(ctx context.Context) (healthy bool, err error) {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		cfg, err := c.opts.TLS()
		if err != nil {
			return false, err
		}
		creds = credentials.NewTLS(cfg)
	}
	act := &activity{}
	act.touch()
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(watchedCreds{TransportCredentials: creds, act: act}),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: c.opts.KeepaliveTime, Timeout: c.opts.KeepaliveTimeout}),
	}
	if c.opts.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(c.opts.Server, dial...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers)))
	defer cancel()
	var frozen atomic.Bool
	if c.opts.StallTimeout > 0 {
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			watch(ctx, conn, act, c.opts.StallTimeout, func() { frozen.Store(true); cancel() })
		}()
	}
	defer func() {
		if frozen.Load() {
			err = fmt.Errorf("the connection read nothing for %v although probed: taken to be frozen", c.opts.StallTimeout)
		}
	}()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// The first request says which version this node already has, so that
	// a server whose snapshot is unchanged need not send it again.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.Version()}); err != nil {
		return false, streamErr(st, err)
	}
	c.opts.Logger.Info("xDS stream open", "server", c.opts.Server, "node", c.opts.NodeID)
	for {
		resp, err := st.Recv()
		if err != nil {
			return healthy, err
		}
		healthy = true
		if err := c.handle(ctx, st, resp); err != nil {
			return healthy, streamErr(st, err)
		}
	}
}

// streamErr is the stream's own status when Send failed for it.
func streamErr(st adsStream, err error) error {
	if _, rerr := st.Recv(); rerr != nil {
		return rerr
	}
	return err
}

// handle applies one push and answers it: an ACK, or a NACK with the
// reason.
func (c *Client) handle(ctx context.Context, st adsStream, resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != TypeURL {
		c.opts.Logger.Warn("xDS: ignored a push of another type", "type", resp.GetTypeUrl())
		return nil
	}
	defer c.receivedOnce.Do(func() { close(c.received) })
	cfg, err := decode(resp.GetResources())
	if err == nil {
		err = c.opts.Apply(cfg)
	}
	if err != nil {
		return c.nack(ctx, st, resp, err)
	}
	version := resp.GetVersionInfo()
	c.version.Store(&version)
	c.rejectedVersion, c.rejectedDigest = "", [32]byte{}
	c.opts.Logger.Info("xDS configuration applied", "version", version, "domains", len(cfg.Domains()))
	return st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, VersionInfo: version, ResponseNonce: resp.GetNonce()})
}

// nack refuses a push, keeping the version applied before it. A push
// refused already, its resources in any order, is reported once, and
// refused again after repeatDelay.
func (c *Client) nack(ctx context.Context, st adsStream, resp *discoveryv3.DiscoveryResponse, err error) error {
	digest := digest(resp.GetResources())
	msg := nackMessage(err)
	if resp.GetVersionInfo() == c.rejectedVersion && digest == c.rejectedDigest {
		t := time.NewTimer(repeatDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	} else {
		c.rejectedVersion, c.rejectedDigest = resp.GetVersionInfo(), digest
		c.opts.Logger.Error("xDS configuration refused; the previous one keeps serving",
			"version", resp.GetVersionInfo(), "errors", len(config.Errors(err)), "err", msg)
		if c.opts.Rejected != nil {
			c.opts.Rejected(err)
		}
	}
	return st.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl:       TypeURL,
		VersionInfo:   c.Version(),
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &status.Status{Code: int32(codes.InvalidArgument), Message: msg},
	})
}

// A NACK's message names the first nackErrors errors, each cut to
// nackErrorLen bytes, and counts the rest, so that it stays far below a
// management server's message limit (gRPC's 4 MiB by default) however
// many errors a push has: a NACK the server cannot read resets the stream,
// and the push comes again.
const (
	nackErrors   = 20
	nackErrorLen = 512
)

// nackMessage is the message of a NACK for err: its first errors, one a
// line, and how many more there are.
func nackMessage(err error) string {
	errs := config.Errors(err)
	var b strings.Builder
	for i, e := range errs {
		if i == nackErrors {
			fmt.Fprintf(&b, "\n... and %d more errors", len(errs)-nackErrors)
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(cut(e.Error(), nackErrorLen))
	}
	return b.String()
}

// cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "..."
	i := n - len(more)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + more
}

// adsStream is the client's end of an ADS stream.
type adsStream = discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient

// decode builds the configuration of a push's resources.
func decode(resources []*anypb.Any) (*config.Config, error) {
	confs := make([]*rlsconfv3.RateLimitConfig, len(resources))
	for i, r := range resources {
		confs[i] = &rlsconfv3.RateLimitConfig{}
		if err := r.UnmarshalTo(confs[i]); err != nil {
			return nil, fmt.Errorf("resource %d (%s): %w", i, r.GetTypeUrl(), err)
		}
	}
	return config.FromXDS(confs)
}

// digest identifies a push's resources, whatever their order: a snapshot
// cache sends the same resources in an order of its choosing each time.
func digest(resources []*anypb.Any) [32]byte {
	sums := make([][32]byte, len(resources))
	for i, r := range resources {
		h := sha256.New()
		fmt.Fprintf(h, "%d:%s%d:", len(r.GetTypeUrl()), r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
		h.Sum(sums[i][:0])
	}
	slices.SortFunc(sums, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}
