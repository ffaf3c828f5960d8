package envsettings

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// env is a lookup over a map.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	s, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		got  any
		want any
	}{
		{"HOST", s.Host, "0.0.0.0"},
		{"PORT", s.Port, 8080},
		{"DEBUG_HOST", s.DebugHost, "0.0.0.0"},
		{"DEBUG_PORT", s.DebugPort, 6070},
		{"GRPC_UDS", s.GRPCUDS, ""},
		{"GRPC_HOST", s.GRPCHost, "0.0.0.0"},
		{"GRPC_PORT", s.GRPCPort, 8081},
		{"GRPC_MAX_CONNECTION_AGE", s.GRPCMaxConnectionAge, 24 * time.Hour},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", s.GRPCMaxConnectionAgeGrace, time.Hour},
		{"GRPC_SERVER_USE_TLS", s.GRPCServerUseTLS, false},
		{"LOG_LEVEL", s.LogLevel, "WARN"},
		{"LOG_FORMAT", s.LogFormat, "text"},
		{"CONFIG_TYPE", s.ConfigType, "FILE"},
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", s.ForceStartWithoutInitialConfig, false},
		{"RUNTIME_ROOT", s.RuntimeRoot, "/srv/runtime_data/current"},
		{"RUNTIME_SUBDIRECTORY", s.RuntimeSubdirectory, ""},
		{"RUNTIME_APPDIRECTORY", s.RuntimeAppDirectory, "config"},
		{"RUNTIME_WATCH_ROOT", s.RuntimeWatchRoot, true},
		{"CONFIG_GRPC_XDS_NODE_ID", s.XDSNodeID, "default"},
		{"CONFIG_GRPC_XDS_SERVER_URL", s.XDSServerURL, "localhost:18000"},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", s.XDSServerConnectRetry, 3 * time.Second},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", s.XDSClientAdditionalHeaders, map[string]string{}},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", s.XDSBackoffInitialInterval, 10 * time.Second},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", s.XDSBackoffMaxInterval, time.Minute},
		{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", s.XDSBackoffRandomFactor, 0.5},
		{"XDS_CLIENT_BACKOFF_JITTER", s.XDSBackoffJitter, true},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", s.XDSMaxMsgSizeInBytes, 0},
		{"USE_PROMETHEUS", s.UsePrometheus, false},
		{"PROMETHEUS_ADDR", s.PrometheusAddr, ":9090"},
		{"PROMETHEUS_PATH", s.PrometheusPath, "/metrics"},
		{"CACHE_KEY_PREFIX", s.CacheKeyPrefix, ""},
		{"LIMIT_LIMIT_HEADER", s.LimitLimitHeader, "RateLimit-Limit"},
		{"LIMIT_REMAINING_HEADER", s.LimitRemainingHeader, "RateLimit-Remaining"},
		{"LIMIT_RESET_HEADER", s.LimitResetHeader, "RateLimit-Reset"},
		{"REDIS_SOCKET_TYPE", s.RedisSocketType, "unix"},
		{"REDIS_TYPE", s.RedisType, "SINGLE"},
		{"REDIS_URL", s.RedisURL, "/var/run/nutcracker/ratelimit.sock"},
		{"REDIS_POOL_SIZE", s.RedisPoolSize, 10},
		{"REDIS_TIMEOUT", s.RedisTimeout, 10 * time.Second},
		{"TRACING_SERVICE_NAME", s.TracingServiceName, "RateLimit"},
		{"TRACING_EXPORTER_PROTOCOL", s.TracingExporterProtocol, "http"},
		{"TRACING_SAMPLING_RATE", s.TracingSamplingRate, 1.0},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: default %#v, want envoy's %#v", tc.name, tc.got, tc.want)
		}
	}
	if len(s.Set) != 0 || len(s.Ignored) != 0 {
		t.Errorf("empty environment: set %v, ignored %v", s.Set, s.Ignored)
	}
}

// TestEveryVariable sets each honoured variable to a value other than
// its default, and checks that it lands in its field.
func TestEveryVariable(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		got         func(*Settings) any
		want        any
	}{
		{"HOST", "127.0.0.1", func(s *Settings) any { return s.Host }, "127.0.0.1"},
		{"PORT", "18080", func(s *Settings) any { return s.Port }, 18080},
		{"DEBUG_HOST", "127.0.0.2", func(s *Settings) any { return s.DebugHost }, "127.0.0.2"},
		{"DEBUG_PORT", "16070", func(s *Settings) any { return s.DebugPort }, 16070},
		{"GRPC_UDS", "/tmp/rl.sock", func(s *Settings) any { return s.GRPCUDS }, "/tmp/rl.sock"},
		{"GRPC_HOST", "::1", func(s *Settings) any { return s.GRPCHost }, "::1"},
		{"GRPC_PORT", "18081", func(s *Settings) any { return s.GRPCPort }, 18081},
		{"GRPC_MAX_CONNECTION_AGE", "90s", func(s *Settings) any { return s.GRPCMaxConnectionAge }, 90 * time.Second},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", "5s", func(s *Settings) any { return s.GRPCMaxConnectionAgeGrace }, 5 * time.Second},
		{"GRPC_SERVER_USE_TLS", "true", func(s *Settings) any { return s.GRPCServerUseTLS }, true},
		{"GRPC_SERVER_TLS_CERT", "/certs/tls.crt", func(s *Settings) any { return s.GRPCServerTLSCert }, "/certs/tls.crt"},
		{"GRPC_SERVER_TLS_KEY", "/certs/tls.key", func(s *Settings) any { return s.GRPCServerTLSKey }, "/certs/tls.key"},
		{"GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt", func(s *Settings) any { return s.GRPCClientTLSCACert }, "/certs/ca.crt"},
		{"GRPC_CLIENT_TLS_SAN", "envoy", func(s *Settings) any { return s.GRPCClientTLSSAN }, "envoy"},
		{"LOG_LEVEL", "debug", func(s *Settings) any { return s.LogLevel }, "debug"},
		{"LOG_FORMAT", "json", func(s *Settings) any { return s.LogFormat }, "json"},
		{"CONFIG_TYPE", "GRPC_XDS_SOTW", func(s *Settings) any { return s.ConfigType }, "GRPC_XDS_SOTW"},
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", "true", func(s *Settings) any { return s.ForceStartWithoutInitialConfig }, true},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "1", func(s *Settings) any { return s.HealthyWithAtLeastOneConfigLoaded }, true},
		{"RUNTIME_ROOT", "/data", func(s *Settings) any { return s.RuntimeRoot }, "/data"},
		{"RUNTIME_SUBDIRECTORY", "ratelimit", func(s *Settings) any { return s.RuntimeSubdirectory }, "ratelimit"},
		{"RUNTIME_APPDIRECTORY", "rules", func(s *Settings) any { return s.RuntimeAppDirectory }, "rules"},
		{"RUNTIME_IGNOREDOTFILES", "true", func(s *Settings) any { return s.RuntimeIgnoreDotFiles }, true},
		{"RUNTIME_WATCH_ROOT", "false", func(s *Settings) any { return s.RuntimeWatchRoot }, false},
		{"CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit", func(s *Settings) any { return s.XDSNodeID }, "envoy-ratelimit"},
		{"CONFIG_GRPC_XDS_NODE_METADATA", "a:1,b:2", func(s *Settings) any { return s.XDSNodeMetadata }, "a:1,b:2"},
		{"CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001", func(s *Settings) any { return s.XDSServerURL }, "envoy-gateway:18001"},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1s", func(s *Settings) any { return s.XDSServerConnectRetry }, time.Second},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-a:1,x-b:two", func(s *Settings) any { return s.XDSClientAdditionalHeaders }, map[string]string{"x-a": "1", "x-b": "two"}},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", func(s *Settings) any { return s.XDSServerUseTLS }, true},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.crt", func(s *Settings) any { return s.XDSClientTLSCert }, "/c.crt"},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/c.key", func(s *Settings) any { return s.XDSClientTLSKey }, "/c.key"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/ca.crt", func(s *Settings) any { return s.XDSServerTLSCACert }, "/ca.crt"},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway", func(s *Settings) any { return s.XDSServerTLSSAN }, "envoy-gateway"},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms", func(s *Settings) any { return s.XDSBackoffInitialInterval }, 100 * time.Millisecond},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "2s", func(s *Settings) any { return s.XDSBackoffMaxInterval }, 2 * time.Second},
		{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.1", func(s *Settings) any { return s.XDSBackoffRandomFactor }, 0.1},
		{"XDS_CLIENT_BACKOFF_JITTER", "false", func(s *Settings) any { return s.XDSBackoffJitter }, false},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "8388608", func(s *Settings) any { return s.XDSMaxMsgSizeInBytes }, 8388608},
		{"USE_PROMETHEUS", "true", func(s *Settings) any { return s.UsePrometheus }, true},
		{"PROMETHEUS_ADDR", ":19001", func(s *Settings) any { return s.PrometheusAddr }, ":19001"},
		{"PROMETHEUS_PATH", "/stats/prometheus", func(s *Settings) any { return s.PrometheusPath }, "/stats/prometheus"},
		{"CACHE_KEY_PREFIX", "rl_", func(s *Settings) any { return s.CacheKeyPrefix }, "rl_"},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true", func(s *Settings) any { return s.StopCacheKeyIncrementWhenOverlimit }, true},
		{"SHADOW_MODE", "true", func(s *Settings) any { return s.ShadowMode }, true},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "true", func(s *Settings) any { return s.LimitResponseHeadersEnabled }, true},
		{"LIMIT_LIMIT_HEADER", "X-RateLimit-Limit", func(s *Settings) any { return s.LimitLimitHeader }, "X-RateLimit-Limit"},
		{"LIMIT_REMAINING_HEADER", "X-RateLimit-Remaining", func(s *Settings) any { return s.LimitRemainingHeader }, "X-RateLimit-Remaining"},
		{"LIMIT_RESET_HEADER", "X-RateLimit-Reset", func(s *Settings) any { return s.LimitResetHeader }, "X-RateLimit-Reset"},
		{"REDIS_SOCKET_TYPE", "tcp", func(s *Settings) any { return s.RedisSocketType }, "tcp"},
		{"REDIS_TYPE", "sentinel", func(s *Settings) any { return s.RedisType }, "sentinel"},
		{"REDIS_URL", "redis:6379", func(s *Settings) any { return s.RedisURL }, "redis:6379"},
		{"REDIS_POOL_SIZE", "50", func(s *Settings) any { return s.RedisPoolSize }, 50},
		{"REDIS_AUTH", "user:pw", func(s *Settings) any { return s.RedisAuth }, "user:pw"},
		{"REDIS_TLS", "true", func(s *Settings) any { return s.RedisTLS }, true},
		{"REDIS_TLS_CLIENT_CERT", "/redis-certs/tls.crt", func(s *Settings) any { return s.RedisTLSClientCert }, "/redis-certs/tls.crt"},
		{"REDIS_TLS_CLIENT_KEY", "/redis-certs/tls.key", func(s *Settings) any { return s.RedisTLSClientKey }, "/redis-certs/tls.key"},
		{"REDIS_TLS_CACERT", "/redis-certs/ca.crt", func(s *Settings) any { return s.RedisTLSCACert }, "/redis-certs/ca.crt"},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true", func(s *Settings) any { return s.RedisTLSSkipHostnameVerification }, true},
		{"REDIS_SENTINEL_AUTH", "sentinel-pw", func(s *Settings) any { return s.RedisSentinelAuth }, "sentinel-pw"},
		{"REDIS_TIMEOUT", "250ms", func(s *Settings) any { return s.RedisTimeout }, 250 * time.Millisecond},
		{"TRACING_ENABLED", "true", func(s *Settings) any { return s.TracingEnabled }, true},
		{"TRACING_SERVICE_NAME", "envoy-ratelimit", func(s *Settings) any { return s.TracingServiceName }, "envoy-ratelimit"},
		{"TRACING_SERVICE_NAMESPACE", "envoy-gateway-system", func(s *Settings) any { return s.TracingServiceNamespace }, "envoy-gateway-system"},
		{"TRACING_SERVICE_INSTANCE_ID", "pod-1", func(s *Settings) any { return s.TracingServiceInstanceID }, "pod-1"},
		{"TRACING_EXPORTER_PROTOCOL", "grpc", func(s *Settings) any { return s.TracingExporterProtocol }, "grpc"},
		{"TRACING_SAMPLING_RATE", "0.2", func(s *Settings) any { return s.TracingSamplingRate }, 0.2},
	} {
		s, err := Load(env(map[string]string{tc.name: tc.value}))
		if err != nil {
			t.Errorf("%s=%s: %v", tc.name, tc.value, err)
			continue
		}
		if got := tc.got(s); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s=%s: got %#v, want %#v", tc.name, tc.value, got, tc.want)
		}
		if !s.Set[tc.name] || len(s.Ignored) != 0 {
			t.Errorf("%s: set %v, ignored %v", tc.name, s.Set, s.Ignored)
		}
	}
}

func TestInvalidValues(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"PORT", "http", "not an integer"},
		{"GRPC_SERVER_USE_TLS", "yes please", "not a boolean"},
		{"REDIS_TIMEOUT", "10", "not a duration"},
		{"TRACING_SAMPLING_RATE", "half", "not a number"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "novalue", "not key:value"},
		{"CONFIG_TYPE", "KUBERNETES", "want one of FILE, GRPC_XDS_SOTW"},
		{"REDIS_SOCKET_TYPE", "udp", "want one of tcp, unix"},
		{"REDIS_TYPE", "ring", "want one of single, cluster, sentinel"},
		{"LOG_FORMAT", "xml", "want one of text, json"},
	} {
		_, err := Load(env(map[string]string{tc.name: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.name+"=") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: error %v, want one naming the variable and %q", tc.name, tc.value, err, tc.want)
		}
	}
	// Every error at once, not only the first.
	_, err := Load(env(map[string]string{"PORT": "x", "GRPC_PORT": "y"}))
	if err == nil || !strings.Contains(err.Error(), "GRPC_PORT") || !strings.Contains(err.Error(), "PORT=\"x\"") {
		t.Errorf("two bad values: %v", err)
	}
}

func TestIgnoredAreListedNeverFatal(t *testing.T) {
	m := map[string]string{}
	for name := range ignored {
		m[name] = "not even a valid value"
	}
	s, err := Load(env(m))
	if err != nil {
		t.Fatalf("ignored variables must never fail: %v", err)
	}
	if len(s.Ignored) != len(ignored) {
		t.Fatalf("ignored: %d listed, want %d", len(s.Ignored), len(ignored))
	}
	if !sort.SliceIsSorted(s.Ignored, func(i, j int) bool { return s.Ignored[i].Name < s.Ignored[j].Name }) {
		t.Error("ignored variables not in name order")
	}
	for _, ig := range s.Ignored {
		if ig.Why == "" || ig.Value != "not even a valid value" || Why(ig.Name) != ig.Why {
			t.Errorf("%+v: want its value and why", ig)
		}
	}
	if Why("PORT") != "" {
		t.Error("PORT is honoured")
	}
}

// envoyNames are the variables of envoyproxy/ratelimit's
// src/settings/settings.go at the compared release.
var envoyNames = strings.Fields(`
HOST PORT DEBUG_HOST DEBUG_PORT GRPC_UDS GRPC_HOST GRPC_PORT GRPC_MAX_CONNECTION_AGE
GRPC_MAX_CONNECTION_AGE_GRACE GRPC_SERVER_USE_TLS GRPC_SERVER_TLS_CERT GRPC_SERVER_TLS_KEY
GRPC_CLIENT_TLS_CACERT GRPC_CLIENT_TLS_SAN LOG_LEVEL LOG_FORMAT CONFIG_TYPE
FORCE_START_WITHOUT_INITIAL_CONFIG CONFIG_GRPC_XDS_NODE_ID CONFIG_GRPC_XDS_NODE_METADATA
CONFIG_GRPC_XDS_SERVER_URL CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL
CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS CONFIG_GRPC_XDS_SERVER_USE_TLS
CONFIG_GRPC_XDS_CLIENT_TLS_CERT CONFIG_GRPC_XDS_CLIENT_TLS_KEY CONFIG_GRPC_XDS_SERVER_TLS_CACERT
CONFIG_GRPC_XDS_SERVER_TLS_SAN XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_MAX_INTERVAL
XDS_CLIENT_BACKOFF_RANDOM_FACTOR XDS_CLIENT_BACKOFF_JITTER XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES
USE_DOG_STATSD USE_DOG_STATSD_MOGRIFIERS USE_STATSD STATSD_HOST STATSD_PORT EXTRA_TAGS
STATS_FLUSH_INTERVAL DISABLE_STATS USE_PROMETHEUS PROMETHEUS_ADDR PROMETHEUS_PATH
PROMETHEUS_MAPPER_YAML RUNTIME_ROOT RUNTIME_SUBDIRECTORY RUNTIME_APPDIRECTORY
RUNTIME_IGNOREDOTFILES RUNTIME_WATCH_ROOT EXPIRATION_JITTER_MAX_SECONDS LOCAL_CACHE_SIZE_IN_BYTES
NEAR_LIMIT_RATIO CACHE_KEY_PREFIX BACKEND_TYPE STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
LIMIT_RESPONSE_HEADERS_ENABLED LIMIT_LIMIT_HEADER LIMIT_REMAINING_HEADER LIMIT_RESET_HEADER
HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_SOCKET_TYPE REDIS_TYPE REDIS_URL REDIS_POOL_SIZE
REDIS_AUTH REDIS_TLS REDIS_TLS_CLIENT_CERT REDIS_TLS_CLIENT_KEY REDIS_TLS_CACERT
REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_PIPELINE_WINDOW REDIS_PIPELINE_LIMIT REDIS_PERSECOND
REDIS_PERSECOND_SOCKET_TYPE REDIS_PERSECOND_TYPE REDIS_PERSECOND_URL REDIS_PERSECOND_POOL_SIZE
REDIS_PERSECOND_AUTH REDIS_PERSECOND_TLS REDIS_SENTINEL_AUTH REDIS_PERSECOND_SENTINEL_AUTH
REDIS_PERSECOND_PIPELINE_WINDOW REDIS_PERSECOND_PIPELINE_LIMIT REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
REDIS_TIMEOUT REDIS_PERSECOND_TIMEOUT REDIS_POOL_ON_EMPTY_BEHAVIOR
REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR MEMCACHE_HOST_PORT MEMCACHE_MAX_IDLE_CONNS MEMCACHE_SRV
MEMCACHE_SRV_REFRESH MEMCACHE_TLS MEMCACHE_TLS_CLIENT_CERT MEMCACHE_TLS_CLIENT_KEY
MEMCACHE_TLS_CACERT MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION SHADOW_MODE QUOTA_MODE
RESPONSE_DYNAMIC_METADATA MERGE_DOMAIN_CONFIG TRACING_ENABLED TRACING_SERVICE_NAME
TRACING_SERVICE_NAMESPACE TRACING_SERVICE_INSTANCE_ID TRACING_EXPORTER_PROTOCOL TRACING_SAMPLING_RATE
`)

// TestEveryEnvoyVariableKnown checks that each of envoy's variables is
// either honoured or ignored with a reason, and nothing else is known
// but GRPC_SERVER_TLS_CA_CERT, which Envoy Gateway sets.
func TestEveryEnvoyVariableKnown(t *testing.T) {
	want := append(append([]string{}, envoyNames...), "GRPC_SERVER_TLS_CA_CERT")
	sort.Strings(want)
	if got := Names(); !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v\nwant %v", got, want)
	}
}

// TestEnvoySettingsSource reads settings.go of the compared release from
// the module cache, when it is there, and checks envoyNames against it.
func TestEnvoySettingsSource(t *testing.T) {
	const module = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Skip("go env:", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), module, "src", "settings", "settings.go")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("envoy's settings.go not in the module cache (go mod download %s): %v", module, err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`envconfig:"([A-Z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		names = append(names, m[1])
	}
	a, b := append([]string{}, names...), append([]string{}, envoyNames...)
	sort.Strings(a)
	sort.Strings(b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("envoy's settings.go reads %v\nthe list here is %v", a, b)
	}
}

// TestEveryVariableDocumented checks that docs/service.md's table names
// every variable, honoured or not.
func TestEveryVariableDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "service.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Names() {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/service.md does not name %s", name)
		}
	}
}
