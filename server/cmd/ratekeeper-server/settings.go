package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/internal/envsettings"
)

// settings are what the service runs with: envoyproxy/ratelimit's
// environment variables first, then the flags given, which win. Every
// part of the command (and the optional parts in their own files, such as
// the xDS client and tracing) reads them from here.
type settings struct {
	// env is the environment as envoy names it; flags do not change it.
	// Parts that only envoy's variables configure read it directly.
	env *envsettings.Settings

	configType string // FILE, or GRPC_XDS_SOTW
	config     string // FILE: a YAML file or a directory of them
	check      bool

	grpcAddr    string // host:port, or a Unix socket's path with grpcNetwork "unix"
	grpcNetwork string
	httpAddr    string
	debugAddr   string // pprof; "" for none
	metricsAddr string // Prometheus's own listener; "" for /metrics on httpAddr
	metricsPath string

	grpcTLS grpcTLS
	redis   redisSettings
	conns   connLimits
	xds     xdsFlags // CONFIG_TYPE=GRPC_XDS_SOTW

	keyPrefix          string
	shadow             bool
	rlqs               bool // serve the rate limit quota service
	rlqsOpts           server.QuotaOptions
	rlqsUnmatched      string
	headers            bool // the IETF RateLimit fields
	limitHeaders       bool // envoy's three fields, under limitHeaderNames
	limitHeaderNames   [3]string
	envoyEnv           bool   // started with no flags: envoy's environment alone
	deniedHitsFlag     string // -denied-hits; "" for the default (see deniedHits)
	countOverLimit     bool
	refunds            bool          // -refunds, RATEKEEPER_REFUNDS
	leases             time.Duration // -leases, RATEKEEPER_LEASES
	onStoreError       string
	forceStart         bool
	healthyWithAConfig bool

	logLevel  string
	logFormat string

	svc serviceFlags // the store's budget, the in-process store's bound, -version
}

// grpcTLS is the gRPC server's TLS: off without a certificate.
type grpcTLS struct {
	cert, key string
	clientCA  string // mTLS: required client certificates, from this CA
	clientSAN string
}

// connLimits bound what one connection may hold.
type connLimits struct {
	httpReadTimeout, httpWriteTimeout, httpIdleTimeout time.Duration
	grpcMaxAge, grpcMaxAgeGrace, grpcMaxIdle           time.Duration
	grpcMaxStreams                                     uint
}

// The service's own defaults, where envoy has none.
const (
	defaultKeyPrefix        = "rk:"
	defaultLogLevel         = "info"
	defaultHTTPReadTimeout  = 5 * time.Second
	defaultHTTPWriteTimeout = 10 * time.Second
	defaultHTTPIdleTimeout  = 30 * time.Second
	defaultGRPCMaxIdle      = 5 * time.Minute
	defaultGRPCMaxStreams   = 1024
)

// fromEnv is the settings of envoy's environment alone.
func fromEnv(e *envsettings.Settings) *settings {
	s := &settings{
		env:         e,
		configType:  strings.ToUpper(e.ConfigType),
		config:      filepath.Join(e.RuntimeRoot, e.RuntimeSubdirectory, e.RuntimeAppDirectory),
		grpcAddr:    net.JoinHostPort(e.GRPCHost, strconv.Itoa(e.GRPCPort)),
		grpcNetwork: "tcp",
		httpAddr:    net.JoinHostPort(e.Host, strconv.Itoa(e.Port)),
		metricsPath: e.PrometheusPath,
		redis:       redisFromEnv(e),
		xds:         xdsFromEnv(e),
		conns: connLimits{
			httpReadTimeout:  defaultHTTPReadTimeout,
			httpWriteTimeout: defaultHTTPWriteTimeout,
			httpIdleTimeout:  defaultHTTPIdleTimeout,
			grpcMaxAge:       e.GRPCMaxConnectionAge,
			grpcMaxAgeGrace:  e.GRPCMaxConnectionAgeGrace,
			grpcMaxIdle:      defaultGRPCMaxIdle,
			grpcMaxStreams:   defaultGRPCMaxStreams,
		},
		keyPrefix:          defaultKeyPrefix,
		shadow:             e.ShadowMode,
		rlqs:               true,
		limitHeaders:       e.LimitResponseHeadersEnabled,
		limitHeaderNames:   [3]string{e.LimitLimitHeader, e.LimitRemainingHeader, e.LimitResetHeader},
		onStoreError:       "unavailable",
		forceStart:         e.ForceStartWithoutInitialConfig,
		healthyWithAConfig: e.HealthyWithAtLeastOneConfigLoaded,
		logLevel:           defaultLogLevel,
		logFormat:          strings.ToLower(e.LogFormat),
	}
	if e.GRPCUDS != "" {
		s.grpcAddr, s.grpcNetwork = e.GRPCUDS, "unix"
	}
	// envoy always opens its debug listener; here it opens when asked
	// for, since it serves pprof.
	if e.Set["DEBUG_HOST"] || e.Set["DEBUG_PORT"] {
		s.debugAddr = net.JoinHostPort(e.DebugHost, strconv.Itoa(e.DebugPort))
	}
	if e.UsePrometheus {
		s.metricsAddr = e.PrometheusAddr
	}
	if e.GRPCServerUseTLS {
		s.grpcTLS = grpcTLS{cert: e.GRPCServerTLSCert, key: e.GRPCServerTLSKey, clientCA: e.GRPCClientTLSCACert, clientSAN: e.GRPCClientTLSSAN}
	}
	if e.Set["CACHE_KEY_PREFIX"] {
		s.keyPrefix = e.CacheKeyPrefix
	}
	if e.Set["LOG_LEVEL"] {
		s.logLevel = e.LogLevel
	}
	return s
}

// parseSettings reads the environment, then the flags.
func parseSettings(args []string, lookup func(string) (string, bool), stderr io.Writer) (*settings, error) {
	e, err := envsettings.Load(lookup)
	if err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	s := fromEnv(e)
	s.envoyEnv = len(args) == 0
	s.refunds, s.leases = e.Refunds, e.Leases
	fs := flag.NewFlagSet("ratekeeper-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.config, "config", s.config, "the configuration: a YAML `file`, or a directory of them (envoyproxy/ratelimit's format); default from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY")
	fs.StringVar(&s.configType, "config-type", s.configType, "where the configuration comes from: FILE (-config), or GRPC_XDS_SOTW (envoy's CONFIG_TYPE)")
	fs.StringVar(&s.grpcAddr, "grpc-addr", s.grpcAddr, "`address` of the gRPC API (Envoy's rate limit service, health, reflection); a path with -grpc-network unix")
	fs.StringVar(&s.grpcNetwork, "grpc-network", s.grpcNetwork, "tcp, or unix for a Unix socket (envoy's GRPC_UDS)")
	fs.StringVar(&s.httpAddr, "http-addr", s.httpAddr, "`address` of the HTTP API (/json, /v1/decide, /healthcheck, /readyz, /metrics)")
	fs.StringVar(&s.debugAddr, "debug-addr", s.debugAddr, "`address` serving /debug/pprof/; none by default")
	fs.StringVar(&s.metricsAddr, "metrics-addr", s.metricsAddr, "`address` of a listener of its own for Prometheus (envoy's PROMETHEUS_ADDR with USE_PROMETHEUS); default: /metrics on -http-addr")
	fs.StringVar(&s.metricsPath, "metrics-path", s.metricsPath, "the `path` of the metrics on -metrics-addr")
	fs.StringVar(&s.grpcTLS.cert, "grpc-tls-cert", s.grpcTLS.cert, "serve gRPC over TLS with this certificate `file` (PEM), re-read when it changes")
	fs.StringVar(&s.grpcTLS.key, "grpc-tls-key", s.grpcTLS.key, "the key `file` of -grpc-tls-cert")
	fs.StringVar(&s.grpcTLS.clientCA, "grpc-tls-client-ca", s.grpcTLS.clientCA, "require client certificates issued by the CAs of this `file` (mTLS)")
	fs.StringVar(&s.grpcTLS.clientSAN, "grpc-tls-client-san", s.grpcTLS.clientSAN, "with -grpc-tls-client-ca, require this `name` in the client's certificate")
	s.redis.flags(fs)
	fs.DurationVar(&s.conns.httpReadTimeout, "http-read-timeout", s.conns.httpReadTimeout, "longest time to read an HTTP request, body included")
	fs.DurationVar(&s.conns.httpWriteTimeout, "http-write-timeout", s.conns.httpWriteTimeout, "longest time from the end of a request's headers to the end of its response")
	fs.DurationVar(&s.conns.httpIdleTimeout, "http-idle-timeout", s.conns.httpIdleTimeout, "an idle HTTP keep-alive connection is closed after this")
	fs.DurationVar(&s.conns.grpcMaxAge, "grpc-max-connection-age", s.conns.grpcMaxAge, "a gRPC connection is asked to go away after this, ±10% (envoy's GRPC_MAX_CONNECTION_AGE)")
	fs.DurationVar(&s.conns.grpcMaxAgeGrace, "grpc-max-connection-age-grace", s.conns.grpcMaxAgeGrace, "then closed after this more, for its calls to end (GRPC_MAX_CONNECTION_AGE_GRACE)")
	fs.DurationVar(&s.conns.grpcMaxIdle, "grpc-max-connection-idle", s.conns.grpcMaxIdle, "a gRPC connection with no call for this long is asked to go away")
	fs.UintVar(&s.conns.grpcMaxStreams, "grpc-max-streams", s.conns.grpcMaxStreams, "most concurrent calls on one gRPC connection")
	fs.StringVar(&s.keyPrefix, "key-prefix", s.keyPrefix, "`prefix` of every Redis key (envoy's CACHE_KEY_PREFIX)")
	fs.BoolVar(&s.rlqs, "rlqs", s.rlqs, "serve envoy's rate limit quota service (RLQS), StreamRateLimitQuotas, on the gRPC listener, for the domains' quota_buckets")
	fs.IntVar(&s.rlqsOpts.MaxStreams, "rlqs-max-streams", 10_000, "most RLQS streams open at once; more end with RESOURCE_EXHAUSTED")
	fs.IntVar(&s.rlqsOpts.MaxBuckets, "rlqs-max-buckets", 1000, "most buckets one RLQS stream holds; more get no assignment")
	fs.StringVar(&s.rlqsUnmatched, "rlqs-unmatched", "abandon", "the answer for a bucket id no quota bucket matches: abandon, allow_all or deny_all")
	fs.BoolVar(&s.shadow, "shadow", s.shadow, "shadow mode for every rule: decide and count, but always answer OK (SHADOW_MODE)")
	fs.BoolVar(&s.headers, "response-headers", s.headers, "add the IETF RateLimit and RateLimit-Policy header fields to responses, for Envoy to pass on")
	fs.BoolVar(&s.limitHeaders, "limit-headers", s.limitHeaders, "add envoy's RateLimit-Limit, -Remaining and -Reset header fields (LIMIT_RESPONSE_HEADERS_ENABLED; names from LIMIT_*_HEADER)")
	fs.StringVar(&s.onStoreError, "on-store-error", s.onStoreError, "answer when the store fails: unavailable (gRPC UNAVAILABLE, HTTP 503), allow or deny")
	fs.BoolVar(&s.forceStart, "force-start", s.forceStart, "start without a valid configuration, and serve once one loads (FORCE_START_WITHOUT_INITIAL_CONFIG)")
	fs.BoolVar(&s.healthyWithAConfig, "healthy-with-config", s.healthyWithAConfig, "fail /healthcheck and gRPC health while no configuration with a domain is applied (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)")
	s.xds.register(fs)
	s.svc.register(fs)
	s.countingFlags(fs)
	fs.BoolVar(&s.check, "check", false, "validate the configuration, print every error, and exit: 0 if valid, else 1")
	fs.StringVar(&s.logLevel, "log-level", s.logLevel, "debug, info, warn or error (LOG_LEVEL)")
	fs.StringVar(&s.logFormat, "log-format", s.logFormat, "text or json (LOG_FORMAT)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if s.svc.version {
		return s, nil // -version needs nothing else
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["xds-server"] && given["config"]:
		return nil, errors.New("give -config or -xds-server, not both")
	case given["xds-server"]:
		s.configType = "GRPC_XDS_SOTW"
	case given["config"]:
		s.configType = "FILE"
	}
	return s, s.validate()
}

// validate refuses settings that cannot work together.
func (s *settings) validate() error {
	errs := s.svc.check()
	s.configType = strings.ToUpper(s.configType)
	if _, ok := configSources[s.configType]; !ok {
		errs = append(errs, fmt.Errorf("configuration type %q: this build knows %s", s.configType, strings.Join(sourceNames(), ", ")))
	}
	if s.config == "" && s.configType == "FILE" {
		errs = append(errs, errors.New("-config is empty"))
	}
	if s.check && s.configType != "FILE" {
		errs = append(errs, errors.New("-check reads -config: a pushed configuration is checked as it arrives"))
	}
	if s.leases != 0 && (s.leases < time.Millisecond || s.leases > ratekeeper.MaxLeaseTTL) {
		errs = append(errs, fmt.Errorf("-leases %v: 0 for none, or 1ms to %v", s.leases, ratekeeper.MaxLeaseTTL))
	}
	if s.grpcNetwork != "tcp" && s.grpcNetwork != "unix" {
		errs = append(errs, fmt.Errorf("-grpc-network %q: tcp or unix", s.grpcNetwork))
	}
	if (s.grpcTLS.cert == "") != (s.grpcTLS.key == "") {
		errs = append(errs, errors.New("gRPC TLS needs both a certificate and its key (GRPC_SERVER_TLS_CERT/_KEY, -grpc-tls-cert/-key)"))
	}
	if s.env.GRPCServerUseTLS && s.grpcTLS.cert == "" {
		errs = append(errs, errors.New("GRPC_SERVER_USE_TLS is true without GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
	}
	if s.grpcTLS.cert == "" && (s.grpcTLS.clientCA != "" || s.grpcTLS.clientSAN != "") {
		errs = append(errs, errors.New("a client CA or SAN needs gRPC TLS: a certificate and key"))
	}
	if s.grpcTLS.clientSAN != "" && s.grpcTLS.clientCA == "" {
		errs = append(errs, errors.New("a client SAN to check needs the client CA (GRPC_CLIENT_TLS_CACERT, -grpc-tls-client-ca)"))
	}
	if s.metricsAddr != "" && !strings.HasPrefix(s.metricsPath, "/") {
		errs = append(errs, fmt.Errorf("metrics path %q must start with /", s.metricsPath))
	}
	if s.conns.grpcMaxStreams == 0 || s.conns.grpcMaxStreams > 1<<31 {
		errs = append(errs, fmt.Errorf("-grpc-max-streams %d: from 1 to 2^31", s.conns.grpcMaxStreams))
	}
	if s.deniedHitsFlag != "" {
		if _, err := server.ParseDeniedHits(s.deniedHitsFlag); err != nil {
			errs = append(errs, err)
		}
	}
	if s.logFormat != "text" && s.logFormat != "json" {
		errs = append(errs, fmt.Errorf("log format %q: text or json", s.logFormat))
	}
	return errors.Join(errs...)
}
