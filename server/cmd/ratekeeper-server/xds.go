package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper/server/internal/envsettings"
	"github.com/ratekeeper/ratekeeper/server/xds"
)

// xdsFlags configure the configuration over xDS, envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW.
type xdsFlags struct {
	server       string
	nodeID       string
	nodeMetadata string
	headers      string
	tls          bool
	clientCert   string
	clientKey    string
	serverCA     string
	serverSAN    string
	backoff      xds.Backoff
	maxMsgSize   int
	keepalive    time.Duration
	keepaliveTO  time.Duration
	stall        time.Duration
}

func init() { configSources["GRPC_XDS_SOTW"] = xdsSource }

// xdsFromEnv is envoy's CONFIG_GRPC_XDS_* and XDS_CLIENT_* variables.
func xdsFromEnv(e *envsettings.Settings) xdsFlags {
	var headers []string
	for k, v := range e.XDSClientAdditionalHeaders {
		headers = append(headers, k+":"+v)
	}
	sort.Strings(headers)
	return xdsFlags{
		server:       e.XDSServerURL,
		nodeID:       e.XDSNodeID,
		nodeMetadata: e.XDSNodeMetadata,
		headers:      strings.Join(headers, ","),
		tls:          e.XDSServerUseTLS,
		clientCert:   e.XDSClientTLSCert,
		clientKey:    e.XDSClientTLSKey,
		serverCA:     e.XDSServerTLSCACert,
		serverSAN:    e.XDSServerTLSSAN,
		backoff: xds.Backoff{
			Initial: e.XDSBackoffInitialInterval, Max: e.XDSBackoffMaxInterval,
			Factor: e.XDSBackoffRandomFactor, Jitter: e.XDSBackoffJitter,
		},
		maxMsgSize:  e.XDSMaxMsgSizeInBytes,
		keepalive:   xds.DefaultKeepaliveTime,
		keepaliveTO: xds.DefaultKeepaliveTimeout,
		stall:       xds.DefaultStallTimeout,
	}
}

// register adds the xDS flags to fs, their defaults from the environment
// (envoy's defaults without it).
func (x *xdsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&x.server, "xds-server", x.server, "configuration over xDS: the management server's `address` (host:port), instead of -config (CONFIG_GRPC_XDS_SERVER_URL)")
	fs.StringVar(&x.nodeID, "xds-node-id", x.nodeID, "the xDS node `ID` the server's snapshots are set for")
	fs.StringVar(&x.nodeMetadata, "xds-node-metadata", x.nodeMetadata, "the xDS node's metadata: `key=value` pairs separated by commas")
	fs.StringVar(&x.headers, "xds-headers", x.headers, "headers added to the xDS stream: `key:value` pairs separated by commas")
	fs.BoolVar(&x.tls, "xds-tls", x.tls, "TLS to the xDS server (implied by the other -xds TLS flags)")
	fs.StringVar(&x.clientCert, "xds-client-cert", x.clientCert, "the client certificate `file` for mTLS to the xDS server")
	fs.StringVar(&x.clientKey, "xds-client-key", x.clientKey, "the client certificate's key `file`")
	fs.StringVar(&x.serverCA, "xds-server-ca", x.serverCA, "the CA `file` the xDS server's certificate is checked against, besides the system's")
	fs.StringVar(&x.serverSAN, "xds-server-san", x.serverSAN, "the `name` the xDS server's certificate must hold (default: the host of -xds-server)")
	fs.DurationVar(&x.backoff.Initial, "xds-backoff-initial", x.backoff.Initial, "the shortest wait before opening a lost xDS stream again")
	fs.DurationVar(&x.backoff.Max, "xds-backoff-max", x.backoff.Max, "the longest wait before opening a lost xDS stream again")
	fs.Float64Var(&x.backoff.Factor, "xds-backoff-factor", x.backoff.Factor, "the factor of the wait at each attempt (envoy's XDS_CLIENT_BACKOFF_RANDOM_FACTOR; below 1 the wait stays at -xds-backoff-initial)")
	fs.BoolVar(&x.backoff.Jitter, "xds-backoff-jitter", x.backoff.Jitter, "draw each wait at random between -xds-backoff-initial and its bound")
	fs.IntVar(&x.maxMsgSize, "xds-max-msg-size", x.maxMsgSize, "the largest xDS push, in `bytes` (0: gRPC's 4 MiB)")
	fs.DurationVar(&x.keepalive, "xds-keepalive-time", x.keepalive, "how long the xDS connection reads nothing before a gRPC keepalive ping (the server must allow pings that often: grpc-go's servers allow one every 5m by default)")
	fs.DurationVar(&x.keepaliveTO, "xds-keepalive-timeout", x.keepaliveTO, "how long a keepalive ping may go unanswered before the xDS connection is closed")
	fs.DurationVar(&x.stall, "xds-stall-timeout", x.stall, "how long the xDS connection may read nothing, although probed, before the stream is taken to be frozen and opened again (negative: never)")
}

// xdsSource connects the service to the xDS server of the settings, and
// applies each push until ctx ends. The first push handled, applied or
// refused, lets the service serve, as envoy's service starts serving then.
func xdsSource(ctx context.Context, s *settings, sink *configSink) error {
	f := s.xds
	logger := sink.logger
	md, ignored := xds.ParseNodeMetadata(f.nodeMetadata)
	for _, e := range ignored {
		logger.Warn("xDS node metadata: ignored an entry without '='", "entry", e)
	}
	headers, err := xds.ParseHeaders(f.headers)
	if err != nil {
		return fmt.Errorf("xDS headers: %w", err)
	}
	opts := xds.Options{
		Server: f.server, NodeID: f.nodeID, NodeMetadata: md, Headers: headers,
		MaxRecvMsgSize: f.maxMsgSize, Backoff: f.backoff, Logger: logger,
		KeepaliveTime: f.keepalive, KeepaliveTimeout: f.keepaliveTO, StallTimeout: f.stall,
		Apply:    sink.apply,
		Rejected: func(error) { sink.metrics.ReloadFailed() },
	}
	if f.tls || f.clientCert != "" || f.clientKey != "" || f.serverCA != "" || f.serverSAN != "" {
		if opts.TLS, err = xds.TLSFiles(f.clientCert, f.clientKey, f.serverCA, f.serverSAN, certErrorLog(logger)); err != nil {
			return err
		}
	}
	client, err := xds.New(opts)
	if err != nil {
		return err
	}
	logger.Info("configuration over xDS", "server", f.server, "node", f.nodeID, "tls", opts.TLS != nil)
	if !s.forceStart {
		logger.Info("waiting for the first xDS push before serving (FORCE_START_WITHOUT_INITIAL_CONFIG, -force-start, serves at once)")
	}
	go func() {
		start := time.Now()
		select {
		case <-client.Received():
			logger.Info("first xDS push handled", "after", time.Since(start).Round(time.Millisecond), "version", client.Version())
			sink.started()
		case <-ctx.Done():
		}
	}()
	return client.Run(ctx)
}
