// Command ratekeeper-server is a rate limit service for Envoy, Istio and
// any program that speaks gRPC or HTTP: a drop-in for
// envoyproxy/ratelimit, reading its configuration format, deciding with
// ratekeeper in Redis or, without Redis, in process.
//
//	ratekeeper-server -config DIR_OR_FILE [-redis URL] [-grpc-addr :8081] [-http-addr :8080]
//	ratekeeper-server -xds-server HOST:PORT [-xds-node-id ID] [-xds-client-cert FILE -xds-client-key FILE -xds-server-ca FILE] [...]
//	ratekeeper-server -check -config DIR_OR_FILE
//
// See docs/service.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// flags are the command line.
type flags struct {
	config       string
	grpcAddr     string
	httpAddr     string
	redisURL     string
	keyPrefix    string
	shadow       bool
	headers      bool
	onStoreError string
	check        bool
	logLevel     string
	xds          xdsFlags
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("ratekeeper-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "the configuration: a YAML `file`, or a directory of them (envoyproxy/ratelimit's format)")
	fs.StringVar(&f.grpcAddr, "grpc-addr", ":8081", "`address` of the gRPC API (Envoy's rate limit service, health, reflection)")
	fs.StringVar(&f.httpAddr, "http-addr", ":8080", "`address` of the HTTP API (/json, /v1/decide, /healthcheck, /readyz, /metrics)")
	fs.StringVar(&f.redisURL, "redis", os.Getenv("REDIS_URL"), "Redis `URL` (default $REDIS_URL): host:port, redis:// or rediss://, redis+cluster://, redis+sentinel://; none keeps limits in process")
	fs.StringVar(&f.keyPrefix, "key-prefix", "rk:", "`prefix` of every Redis key")
	fs.BoolVar(&f.shadow, "shadow", false, "shadow mode for every rule: decide and count, but always answer OK")
	fs.BoolVar(&f.headers, "response-headers", false, "add the IETF RateLimit and RateLimit-Policy header fields to responses, for Envoy to pass on")
	fs.StringVar(&f.onStoreError, "on-store-error", "unavailable", "answer when the store fails: unavailable (gRPC UNAVAILABLE, HTTP 503), allow or deny")
	fs.BoolVar(&f.check, "check", false, "validate the configuration, print every error, and exit: 0 if valid, else 1")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	f.xds.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := checkXDSFlags(f); err != nil {
		return nil, err
	}
	if f.config == "" && f.xds.server == "" {
		return nil, errors.New("-config (or -xds-server) is required")
	}
	return f, nil
}

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "ratekeeper-server:", err)
			return 2
		}
		return 0
	}
	if f.check {
		return check(f.config, stdout, stderr)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintln(stderr, "ratekeeper-server: -log-level:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// go-redis logs every failed dial; the service reports store errors
	// itself, at most once a second, so its lines are for debugging only.
	redis.SetLogger(redisLogger{logger})
	if err := serve(ctx, f, logger); err != nil {
		logger.Error("ratekeeper-server stopped", "err", err)
		return 1
	}
	return 0
}

// check validates a configuration, printing each error on a line.
func check(path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path)
	if err != nil {
		for _, e := range unjoin(err) {
			fmt.Fprintln(stderr, e)
		}
		return 1
	}
	n := len(cfg.Domains())
	plural := "s"
	if n == 1 {
		plural = ""
	}
	fmt.Fprintf(stdout, "%s: valid, %d domain%s\n", path, n, plural)
	return 0
}

// unjoin lists the errors of an errors.Join.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// serve runs the service until ctx ends.
func serve(ctx context.Context, f *flags, logger *slog.Logger) error {
	onErr, err := server.ParseOnStoreError(f.onStoreError)
	if err != nil {
		return err
	}
	var cfg *config.Config
	if f.xds.server == "" {
		if cfg, err = config.Load(f.config); err != nil {
			for _, e := range unjoin(err) {
				logger.Error("invalid configuration", "err", e)
			}
			return errors.New("invalid configuration")
		}
	}
	st, err := openStore(f.redisURL, f.keyPrefix)
	if err != nil {
		return err
	}
	defer st.close()
	if st.ready == nil {
		logger.Warn("no Redis named (-redis or REDIS_URL): limits are kept in process, per instance")
	} else {
		logger.Info("deciding in Redis", "redis", st.describe)
	}

	tr, err := startTracingFromEnv(ctx, logger)
	if err != nil {
		return err
	}
	defer tr.shutdown(logger)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	svc := server.New(tr.store(st.store), server.Options{Shadow: f.shadow, ResponseHeaders: f.headers, OnStoreError: onErr, Metrics: metrics, Logger: logger})
	xm, err := startXDS(ctx, f.xds, svc, metrics, logger)
	if err != nil {
		return err
	}
	if cfg != nil {
		if err := svc.SetConfig(cfg); err != nil {
			return err
		}
		logger.Info("configuration loaded", "path", f.config, "domains", len(cfg.Domains()))
		logWarnings(logger, cfg)
	}

	grpcLn, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		grpcLn.Close()
		return err
	}
	g := grpc.NewServer(append(server.GRPCOptions(logger, metrics), tr.grpcOptions()...)...)
	server.RegisterGRPC(g, svc)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(g, healthSrv)
	reflection.Register(g)
	httpSrv := &http.Server{
		Handler:           xm.gate(tr.http(server.HTTPHandler(svc, st.ready, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))),
		ReadHeaderTimeout: 10 * time.Second,
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- g.Serve(grpcLn) }()
	go func() { errc <- httpSrv.Serve(httpLn) }()
	go func() {
		if xm != nil {
			return // the xDS client applies each push
		}
		errc <- config.Watch(ctx, f.config, func(c *config.Config) {
			if err := svc.SetConfig(c); err != nil {
				metrics.ReloadFailed()
				logger.Error("configuration not applied; keeping the previous one", "err", err)
				return
			}
			logger.Info("configuration reloaded", "generation", svc.Generation(), "domains", len(c.Domains()))
			logWarnings(logger, c)
		}, func(err error) {
			metrics.ReloadFailed()
			for _, e := range unjoin(err) {
				logger.Error("invalid configuration; keeping the previous one", "err", e)
			}
		})
	}()
	go watchHealth(ctx, healthSrv, st.ready, logger)
	logger.Info("serving", "grpc", grpcLn.Addr().String(), "http", httpLn.Addr().String())

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shutdown(g, httpSrv)
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// logWarnings logs what the configuration holds that envoyproxy/ratelimit
// would accept but ignore.
func logWarnings(logger *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings() {
		logger.Warn("configuration: ignored", "warning", w)
	}
}

// shutdown stops both servers, letting calls in flight finish for up to
// five seconds.
func shutdown(g *grpc.Server, h *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	h.Shutdown(ctx)
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
	}
}

// watchHealth keeps gRPC health in step with the store: SERVING while it
// answers, NOT_SERVING while not.
func watchHealth(ctx context.Context, h *health.Server, ready func() error, logger *slog.Logger) {
	var last healthpb.HealthCheckResponse_ServingStatus = -1
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if ready != nil {
			if err := ready(); err != nil {
				st = healthpb.HealthCheckResponse_NOT_SERVING
				if last != st {
					logger.Warn("not ready: the store does not answer", "err", err)
				}
			} else if last == healthpb.HealthCheckResponse_NOT_SERVING {
				logger.Info("ready: the store answers")
			}
		}
		if st != last {
			h.SetServingStatus("", st)
			h.SetServingStatus("envoy.service.ratelimit.v3.RateLimitService", st)
			last = st
		}
		select {
		case <-ctx.Done():
			h.Shutdown()
			return
		case <-t.C:
		}
	}
}

// redisLogger routes go-redis's own log lines to the debug level.
type redisLogger struct{ logger *slog.Logger }

// Printf implements go-redis's internal.Logging.
func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.logger.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
