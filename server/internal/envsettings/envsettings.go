// Package envsettings reads envoyproxy/ratelimit's environment variables,
// with their meanings and defaults (src/settings/settings.go of the
// release the service is compared with), so that ratekeeper-server starts
// where envoy's image is started: by Envoy Gateway, or Istio's sample.
//
// Every variable envoy reads is known here. Those that have a meaning for
// ratekeeper-server fill Settings; the others are accepted, and Load lists
// the ones that are set with why they are not needed, for the service to
// log once.
package envsettings

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Settings are envoy's settings that ratekeeper-server honours, named as
// envoy names them.
type Settings struct {
	// Listeners.
	Host      string // HOST
	Port      int    // PORT
	DebugHost string // DEBUG_HOST
	DebugPort int    // DEBUG_PORT
	GRPCUDS   string // GRPC_UDS: a Unix socket for gRPC instead of GRPC_HOST:GRPC_PORT
	GRPCHost  string // GRPC_HOST
	GRPCPort  int    // GRPC_PORT

	GRPCMaxConnectionAge      time.Duration // GRPC_MAX_CONNECTION_AGE
	GRPCMaxConnectionAgeGrace time.Duration // GRPC_MAX_CONNECTION_AGE_GRACE

	// gRPC server TLS.
	GRPCServerUseTLS    bool   // GRPC_SERVER_USE_TLS
	GRPCServerTLSCert   string // GRPC_SERVER_TLS_CERT
	GRPCServerTLSKey    string // GRPC_SERVER_TLS_KEY
	GRPCClientTLSCACert string // GRPC_CLIENT_TLS_CACERT: require client certificates from this CA
	GRPCClientTLSSAN    string // GRPC_CLIENT_TLS_SAN: and this DNS name in them

	// Logging.
	LogLevel  string // LOG_LEVEL
	LogFormat string // LOG_FORMAT: text or json

	// Configuration.
	ConfigType                        string // CONFIG_TYPE: FILE or GRPC_XDS_SOTW
	ForceStartWithoutInitialConfig    bool   // FORCE_START_WITHOUT_INITIAL_CONFIG
	HealthyWithAtLeastOneConfigLoaded bool   // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	RuntimeRoot                       string // RUNTIME_ROOT
	RuntimeSubdirectory               string // RUNTIME_SUBDIRECTORY
	RuntimeAppDirectory               string // RUNTIME_APPDIRECTORY
	RuntimeIgnoreDotFiles             bool   // RUNTIME_IGNOREDOTFILES
	RuntimeWatchRoot                  bool   // RUNTIME_WATCH_ROOT

	// Configuration over xDS (CONFIG_TYPE=GRPC_XDS_SOTW).
	XDSNodeID                  string            // CONFIG_GRPC_XDS_NODE_ID
	XDSNodeMetadata            string            // CONFIG_GRPC_XDS_NODE_METADATA: "key1:val1,key2:val2"
	XDSServerURL               string            // CONFIG_GRPC_XDS_SERVER_URL
	XDSServerConnectRetry      time.Duration     // CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
	XDSClientAdditionalHeaders map[string]string // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS
	XDSServerUseTLS            bool              // CONFIG_GRPC_XDS_SERVER_USE_TLS
	XDSClientTLSCert           string            // CONFIG_GRPC_XDS_CLIENT_TLS_CERT
	XDSClientTLSKey            string            // CONFIG_GRPC_XDS_CLIENT_TLS_KEY
	XDSServerTLSCACert         string            // CONFIG_GRPC_XDS_SERVER_TLS_CACERT
	XDSServerTLSSAN            string            // CONFIG_GRPC_XDS_SERVER_TLS_SAN
	XDSBackoffInitialInterval  time.Duration     // XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
	XDSBackoffMaxInterval      time.Duration     // XDS_CLIENT_BACKOFF_MAX_INTERVAL
	XDSBackoffRandomFactor     float64           // XDS_CLIENT_BACKOFF_RANDOM_FACTOR
	XDSBackoffJitter           bool              // XDS_CLIENT_BACKOFF_JITTER
	XDSMaxMsgSizeInBytes       int               // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES (0: gRPC's default)

	// Metrics.
	UsePrometheus  bool   // USE_PROMETHEUS: metrics on their own listener
	PrometheusAddr string // PROMETHEUS_ADDR
	PrometheusPath string // PROMETHEUS_PATH

	// Behaviour.
	CacheKeyPrefix                     string // CACHE_KEY_PREFIX
	StopCacheKeyIncrementWhenOverlimit bool   // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	ShadowMode                         bool   // SHADOW_MODE
	LimitResponseHeadersEnabled        bool   // LIMIT_RESPONSE_HEADERS_ENABLED
	LimitLimitHeader                   string // LIMIT_LIMIT_HEADER
	LimitRemainingHeader               string // LIMIT_REMAINING_HEADER
	LimitResetHeader                   string // LIMIT_RESET_HEADER

	// Redis.
	RedisSocketType                  string        // REDIS_SOCKET_TYPE: tcp or unix
	RedisType                        string        // REDIS_TYPE: single, cluster or sentinel (any case)
	RedisURL                         string        // REDIS_URL
	RedisPoolSize                    int           // REDIS_POOL_SIZE
	RedisAuth                        string        // REDIS_AUTH: password, or user:password
	RedisTLS                         bool          // REDIS_TLS
	RedisTLSClientCert               string        // REDIS_TLS_CLIENT_CERT
	RedisTLSClientKey                string        // REDIS_TLS_CLIENT_KEY
	RedisTLSCACert                   string        // REDIS_TLS_CACERT
	RedisTLSSkipHostnameVerification bool          // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
	RedisSentinelAuth                string        // REDIS_SENTINEL_AUTH: the sentinels' password, or user:password
	RedisTimeout                     time.Duration // REDIS_TIMEOUT

	// Tracing (OpenTelemetry over OTLP; OTEL_* variables are the SDK's own).
	TracingEnabled           bool    // TRACING_ENABLED
	TracingServiceName       string  // TRACING_SERVICE_NAME
	TracingServiceNamespace  string  // TRACING_SERVICE_NAMESPACE
	TracingServiceInstanceID string  // TRACING_SERVICE_INSTANCE_ID
	TracingExporterProtocol  string  // TRACING_EXPORTER_PROTOCOL: http or grpc
	TracingSamplingRate      float64 // TRACING_SAMPLING_RATE
	// TracingEndpoint is the SDK's OTEL_EXPORTER_OTLP_ENDPOINT, which the
	// SDK reads itself: here for the log that says where spans go.
	TracingEndpoint string

	// ratekeeper's own, where only the environment is set, as under
	// Envoy Gateway.
	Refunds bool          // RATEKEEPER_REFUNDS: true or false, as -refunds
	Leases  time.Duration // RATEKEEPER_LEASES: a TTL, or 0 for none, as -leases

	// Set holds the names of the variables that were present in the
	// environment, honoured or not.
	Set map[string]bool
	// Ignored lists the variables present that ratekeeper-server has no
	// use for, in name order, each with why.
	Ignored []Ignored
}

// Ignored is a variable of envoy's that is set but not needed.
type Ignored struct {
	Name  string
	Value string
	Why   string
}

// Load reads the environment through lookup (os.LookupEnv in the
// service). A variable absent takes envoy's default; a value that does
// not parse is an error naming the variable. Variables with no
// counterpart never fail.
func Load(lookup func(string) (string, bool)) (*Settings, error) {
	s := &Settings{Set: map[string]bool{}}
	var errs []error
	for _, v := range append(honoured(s), own(s)...) {
		raw, ok := lookup(v.name)
		if ok {
			s.Set[v.name] = true
		} else {
			raw = v.def
		}
		if err := v.parse(raw); err != nil {
			if !ok {
				panic("envsettings: default of " + v.name + ": " + err.Error())
			}
			errs = append(errs, fmt.Errorf("%s=%q: %v", v.name, raw, err))
		}
	}
	for _, name := range sortedIgnored() {
		if raw, ok := lookup(name); ok {
			s.Set[name] = true
			s.Ignored = append(s.Ignored, Ignored{Name: name, Value: raw, Why: ignored[name]})
		}
	}
	if err := s.check(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// check refuses what envoy would also refuse: values outside a variable's
// set of choices.
func (s *Settings) check() error {
	var errs []error
	oneOf := func(name, val string, choices ...string) {
		for _, c := range choices {
			if strings.EqualFold(val, c) {
				return
			}
		}
		errs = append(errs, fmt.Errorf("%s=%q: want one of %s", name, val, strings.Join(choices, ", ")))
	}
	oneOf("CONFIG_TYPE", s.ConfigType, "FILE", "GRPC_XDS_SOTW")
	oneOf("REDIS_SOCKET_TYPE", s.RedisSocketType, "tcp", "unix")
	oneOf("REDIS_TYPE", s.RedisType, "single", "cluster", "sentinel")
	oneOf("LOG_FORMAT", s.LogFormat, "text", "json")
	oneOf("TRACING_EXPORTER_PROTOCOL", s.TracingExporterProtocol, "http", "grpc")
	return errors.Join(errs...)
}

// variable is one honoured variable: its name, envoy's default and where
// its value goes.
type variable struct {
	name, def string
	parse     func(string) error
}

func str(p *string) func(string) error {
	return func(v string) error { *p = v; return nil }
}

func integer(p *int) func(string) error {
	return func(v string) error {
		if v == "" {
			*p = 0
			return nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return errors.New("not an integer")
		}
		*p = n
		return nil
	}
}

func boolean(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return errors.New("not a boolean (true or false)")
		}
		*p = b
		return nil
	}
}

// ttl reads a TTL such as 50ms, or 0 or nothing for none.
func ttl(p *time.Duration) func(string) error {
	return func(v string) error {
		if v = strings.TrimSpace(v); v == "" || v == "0" {
			*p = 0
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("want a duration such as 50ms, or 0 for none")
		}
		*p = d
		return nil
	}
}

// strict reads true or false, and nothing else.
func strict(p *bool) func(string) error {
	return func(v string) error {
		switch v {
		case "true", "false":
			*p = v == "true"
			return nil
		}
		return errors.New("want true or false")
	}
}

func duration(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return errors.New("not a duration (such as 10s or 1h)")
		}
		*p = d
		return nil
	}
}

func float(p *float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return errors.New("not a number")
		}
		*p = f
		return nil
	}
}

// mapping parses envconfig's map form, "key1:value1,key2:value2".
func mapping(p *map[string]string) func(string) error {
	return func(v string) error {
		m := map[string]string{}
		if v != "" {
			for _, pair := range strings.Split(v, ",") {
				k, val, ok := strings.Cut(pair, ":")
				if !ok {
					return fmt.Errorf("%q is not key:value", pair)
				}
				m[k] = val
			}
		}
		*p = m
		return nil
	}
}

// sortedIgnored is the names of ignored, in order.
func sortedIgnored() []string {
	names := make([]string, 0, len(ignored))
	for n := range ignored {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Names lists every variable envoy reads, honoured or ignored, in order.
func Names() []string {
	var names []string
	for _, v := range honoured(&Settings{}) {
		names = append(names, v.name)
	}
	names = append(names, sortedIgnored()...)
	sort.Strings(names)
	return names
}

// Why says why a variable is ignored, or "" when it is honoured.
func Why(name string) string { return ignored[name] }
