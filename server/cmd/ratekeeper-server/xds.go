package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/config"
	"github.com/ratekeeper/ratekeeper/server/xds"
)

// xdsFlags configure the configuration over xDS, envoyproxy/ratelimit's
// CONFIG_TYPE=GRPC_XDS_SOTW, instead of -config.
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
	// forceStart serves before the first push (FORCE_START_WITHOUT_INITIAL_CONFIG).
	forceStart bool
	// healthyWithConfig fails /healthcheck while no configuration of at
	// least one domain is applied (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
	healthyWithConfig bool
}

// register adds the xDS flags to fs, with envoy's defaults.
func (x *xdsFlags) register(fs *flag.FlagSet) {
	def := xds.DefaultBackoff()
	fs.StringVar(&x.server, "xds-server", "", "configuration over xDS: the management server's `address` (host:port), instead of -config")
	fs.StringVar(&x.nodeID, "xds-node-id", "default", "the xDS node `ID` the server's snapshots are set for")
	fs.StringVar(&x.nodeMetadata, "xds-node-metadata", "", "the xDS node's metadata: `key=value` pairs separated by commas")
	fs.StringVar(&x.headers, "xds-headers", "", "headers added to the xDS stream: `key:value` pairs separated by commas")
	fs.BoolVar(&x.tls, "xds-tls", false, "TLS to the xDS server (implied by the other -xds TLS flags)")
	fs.StringVar(&x.clientCert, "xds-client-cert", "", "the client certificate `file` for mTLS to the xDS server")
	fs.StringVar(&x.clientKey, "xds-client-key", "", "the client certificate's key `file`")
	fs.StringVar(&x.serverCA, "xds-server-ca", "", "the CA `file` the xDS server's certificate is checked against, besides the system's")
	fs.StringVar(&x.serverSAN, "xds-server-san", "", "the `name` the xDS server's certificate must hold (default: the host of -xds-server)")
	fs.DurationVar(&x.backoff.Initial, "xds-backoff-initial", def.Initial, "the shortest wait before opening a lost xDS stream again")
	fs.DurationVar(&x.backoff.Max, "xds-backoff-max", def.Max, "the longest wait before opening a lost xDS stream again")
	fs.Float64Var(&x.backoff.Factor, "xds-backoff-factor", def.Factor, "the factor of the wait at each attempt (envoy's XDS_CLIENT_BACKOFF_RANDOM_FACTOR; below 1 the wait stays at -xds-backoff-initial)")
	fs.BoolVar(&x.backoff.Jitter, "xds-backoff-jitter", def.Jitter, "draw each wait at random between -xds-backoff-initial and its bound")
	fs.IntVar(&x.maxMsgSize, "xds-max-msg-size", 0, "the largest xDS push, in `bytes` (0: gRPC's 4 MiB)")
	fs.BoolVar(&x.forceStart, "force-start", false, "with -xds-server, serve before the first push (requests fail until one is applied)")
	fs.BoolVar(&x.healthyWithConfig, "healthy-with-config", false, "with -xds-server, fail /healthcheck while no configuration with a domain is applied")
}

// xdsMode is a running xDS configuration: the client and the health of
// its configuration.
type xdsMode struct {
	client *xds.Client
	flags  xdsFlags
	// domains is the number of domains of the configuration applied.
	domains atomic.Int64
}

// startXDS connects the service to the xDS server of f; nil when f names
// none. Unless f.forceStart, it returns once the first push is handled,
// as envoy's service starts serving only then.
func startXDS(ctx context.Context, f xdsFlags, svc *server.Service, metrics *server.Metrics, logger *slog.Logger) (*xdsMode, error) {
	if f.server == "" {
		return nil, nil
	}
	md, ignored := xds.ParseNodeMetadata(f.nodeMetadata)
	for _, e := range ignored {
		logger.Warn("xDS node metadata: ignored an entry without '='", "entry", e)
	}
	headers, err := xds.ParseHeaders(f.headers)
	if err != nil {
		return nil, fmt.Errorf("xDS headers: %w", err)
	}
	m := &xdsMode{flags: f}
	opts := xds.Options{
		Server: f.server, NodeID: f.nodeID, NodeMetadata: md, Headers: headers,
		MaxRecvMsgSize: f.maxMsgSize, Backoff: f.backoff, Logger: logger,
		Apply: func(c *config.Config) error {
			if err := svc.SetConfig(c); err != nil {
				return err
			}
			m.domains.Store(int64(len(c.Domains())))
			return nil
		},
		Rejected: func(error) { metrics.ReloadFailed() },
	}
	if f.tls || f.clientCert != "" || f.clientKey != "" || f.serverCA != "" || f.serverSAN != "" {
		if opts.TLS, err = xds.TLSFiles(f.clientCert, f.clientKey, f.serverCA, f.serverSAN); err != nil {
			return nil, err
		}
	}
	if m.client, err = xds.New(opts); err != nil {
		return nil, err
	}
	go m.client.Run(ctx)
	logger.Info("configuration over xDS", "server", f.server, "node", f.nodeID, "tls", opts.TLS != nil)
	if f.forceStart {
		return m, nil
	}
	logger.Info("waiting for the first xDS push before serving (-force-start serves at once)")
	start := time.Now()
	select {
	case <-m.client.Received():
	case <-ctx.Done():
		return m, nil // stopped while waiting: serve shuts down at once
	}
	logger.Info("first xDS push handled", "after", time.Since(start).Round(time.Millisecond), "version", m.client.Version())
	return m, nil
}

// gate answers GET /healthcheck with 500 while -healthy-with-config
// holds and no configuration with a domain is applied, as envoy's
// service answers; everything else goes to h.
func (m *xdsMode) gate(h http.Handler) http.Handler {
	if m == nil || !m.flags.healthyWithConfig {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/healthcheck" && m.domains.Load() == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkXDSFlags reports flags that cannot go together.
func checkXDSFlags(f *flags) error {
	switch {
	case f.xds.server != "" && f.config != "":
		return errors.New("give -config or -xds-server, not both")
	case f.xds.server != "" && f.check:
		return errors.New("-check reads -config: a pushed configuration is checked as it arrives")
	case f.xds.server == "" && (f.xds.forceStart || f.xds.healthyWithConfig):
		return errors.New("-force-start and -healthy-with-config go with -xds-server")
	}
	return nil
}
