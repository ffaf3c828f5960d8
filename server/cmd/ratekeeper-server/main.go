// Command ratekeeper-server is a rate limit service for Envoy, Istio and
// any program that speaks gRPC or HTTP: a drop-in for
// envoyproxy/ratelimit, reading its configuration format and its
// environment variables, deciding with ratekeeper in Redis or, without
// Redis, in process.
//
//	ratekeeper-server [-config DIR_OR_FILE] [-redis URL] [-grpc-addr :8081] [-http-addr :8080]
//	ratekeeper-server -xds-server HOST:PORT [-xds-node-id ID] [-xds-client-cert FILE -xds-client-key FILE -xds-server-ca FILE]
//	ratekeeper-server -check [-config DIR_OR_FILE]
//
// Started with no flags, it reads envoyproxy/ratelimit's environment
// (RUNTIME_ROOT, REDIS_URL, GRPC_SERVER_USE_TLS, USE_PROMETHEUS, …);
// flags win over it. See docs/service.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // calendar windows' time zones, on a system without them

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

// run is the command, with its environment read through env; it returns
// the exit code.
func run(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	s, err := parseSettings(args, env, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		for _, e := range config.Errors(err) {
			fmt.Fprintln(stderr, "ratekeeper-server:", e)
		}
		return 2
	}
	if s.svc.version {
		printVersion(stdout)
		return 0
	}
	if s.check {
		return check(s.config, stdout, stderr)
	}
	logger, err := newLogger(stderr, s.logLevel, s.logFormat)
	if err != nil {
		fmt.Fprintln(stderr, "ratekeeper-server:", err)
		return 2
	}
	// go-redis logs every failed dial; the service reports store errors
	// itself, at most once a second, so its lines are for debugging only.
	redis.SetLogger(redisLogger{logger})
	logIgnored(logger, s.env.Ignored)
	if err := serve(ctx, s, logger); err != nil {
		logger.Error("ratekeeper-server stopped", "err", err)
		return 1
	}
	logger.Info("ratekeeper-server stopped")
	return 0
}

// check validates a configuration, printing each error on a line.
func check(path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path)
	if err != nil {
		for _, e := range config.Errors(err) {
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

// serve runs the service until ctx ends.
func serve(ctx context.Context, s *settings, logger *slog.Logger) error {
	onErr, err := server.ParseOnStoreError(s.onStoreError)
	if err != nil {
		return err
	}
	if s.rlqsOpts.Unmatched, err = server.ParseUnmatched(s.rlqsUnmatched); err != nil {
		return err
	}
	if s.rlqsOpts.MaxStreams < 1 || s.rlqsOpts.MaxBuckets < 1 {
		return fmt.Errorf("-rlqs-max-streams %d and -rlqs-max-buckets %d must each be at least 1", s.rlqsOpts.MaxStreams, s.rlqsOpts.MaxBuckets)
	}
	certError := certErrorLog(logger)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts, err := runHooks(ctx, s, logger)
	if err != nil {
		return err
	}
	defer closeHooks(parts, logger)

	st, err := openStore(s.redis, s.keyPrefix, s.svc.memKeys, certError)
	if err != nil {
		return err
	}
	defer st.close()
	if st.ready == nil {
		logger.Warn("no Redis named (-redis or REDIS_URL): limits are kept in process, per instance")
	} else {
		logger.Info("deciding in Redis", "redis", st.describe)
	}
	store := st.store
	for _, p := range parts {
		if p.wrapStore != nil {
			store = p.wrapStore(store)
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := server.NewMetrics(reg)
	opts := server.Options{
		Shadow: s.shadow, ResponseHeaders: s.headers, OnStoreError: onErr, Metrics: metrics, Logger: logger,
		StoreTimeout: s.svc.storeTimeout, DeniedHits: s.deniedHits(), CountOverLimit: s.countOverLimit,
		Refunds: s.refunds, Leases: s.leases,
	}
	if s.refunds {
		logger.Warn("refunds are on for every rule (-refunds, RATEKEEPER_REFUNDS): any caller that reaches the API can give a key back")
	}
	if s.limitHeaders {
		opts.LimitHeaders = &server.LimitHeaders{Limit: s.limitHeaderNames[0], Remaining: s.limitHeaderNames[1], Reset: s.limitHeaderNames[2]}
	}
	svc := server.New(store, opts)

	origin := s.config
	if s.configType != "FILE" {
		origin = s.configType
	}
	sink := newConfigSink(svc, metrics, logger, origin)
	errc := make(chan error, 5)
	go func() { errc <- configSources[s.configType](ctx, s, sink) }()
	if !s.forceStart {
		select {
		case <-sink.first:
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	}

	gopts, err := grpcOptions(s, certError)
	if err != nil {
		return fmt.Errorf("gRPC TLS: %w", err)
	}
	gopts = append(gopts, server.GRPCOptions(logger, metrics)...)
	for _, p := range parts {
		gopts = append(gopts, p.grpcOptions...)
	}
	lns, err := listenAll([]struct{ name, network, addr string }{
		{"grpc", s.grpcNetwork, s.grpcAddr},
		{"http", "tcp", s.httpAddr},
		{"metrics", "tcp", s.metricsAddr},
		{"debug", "tcp", s.debugAddr},
	})
	if err != nil {
		return err
	}
	g := grpc.NewServer(gopts...)
	server.RegisterGRPC(g, svc)
	if s.rlqs {
		server.RegisterQuota(g, server.NewQuota(svc, st.quota, s.rlqsOpts))
	}
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(g, healthSrv)
	reflection.Register(g)

	var httpMetrics http.Handler
	if s.metricsAddr == "" {
		httpMetrics = metricsHandler(reg)
	}
	healthy := configHealthy(s, sink)
	var handler http.Handler = withHealthcheck(server.HTTPHandler(svc, st.ready, httpMetrics), healthy)
	for _, p := range parts {
		if p.wrapHTTP != nil {
			handler = p.wrapHTTP(handler)
		}
	}
	api := httpServer(handler, s.conns)
	servers := []*http.Server{api}
	go func() { errc <- g.Serve(lns[0].ln) }()
	go func() { errc <- api.Serve(lns[1].ln) }()
	if ln := lns[2].ln; ln != nil {
		h := httpServer(onPath(s.metricsPath, metricsHandler(reg)), s.conns)
		servers = append(servers, h)
		go func() { errc <- h.Serve(ln) }()
	}
	if ln := lns[3].ln; ln != nil {
		// Profiles take longer than a request: no write timeout here.
		h := &http.Server{Handler: debugHandler(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, h)
		go func() { errc <- h.Serve(ln) }()
	}
	go watchHealth(ctx, healthSrv, st.ready, healthy, logger)
	logServing(logger, s, lns)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	logger.Info("shutting down: calls in flight have 5 s to finish")
	shutdown(g, servers)
	// What leases hold goes back, for the other replicas to take.
	if cerr := svc.Close(); cerr != nil {
		logger.Warn("leases not given back: the store counts them until they expire", "error", cerr)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// logServing logs exactly what the service listens on.
func logServing(logger *slog.Logger, s *settings, lns []listener) {
	args := []any{}
	for _, l := range lns {
		if l.ln != nil {
			args = append(args, l.name, l.ln.Addr().String())
		}
	}
	if lns[2].ln != nil {
		args = append(args, "metrics_path", s.metricsPath)
	}
	args = append(args, "grpc_tls", s.grpcTLS.cert != "", "grpc_mtls", s.grpcTLS.clientCA != "")
	logger.Info("serving", args...)
}

// runHooks starts the optional parts of this build.
func runHooks(ctx context.Context, s *settings, logger *slog.Logger) ([]*hookParts, error) {
	var parts []*hookParts
	for _, h := range hooks {
		p, err := h(ctx, s, logger)
		if err != nil {
			closeHooks(parts, logger)
			return nil, err
		}
		if p != nil {
			parts = append(parts, p)
		}
	}
	return parts, nil
}

// closeHooks stops the optional parts, within five seconds in all.
func closeHooks(parts []*hookParts, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range parts {
		if p.close != nil {
			if err := p.close(ctx); err != nil {
				logger.Warn("stopping", "err", err)
			}
		}
	}
}

// shutdown stops the servers, letting calls in flight finish for up to
// five seconds.
func shutdown(g *grpc.Server, hs []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	for _, h := range hs {
		h.Shutdown(ctx)
	}
	select {
	case <-done:
	case <-ctx.Done():
		g.Stop()
	}
}
