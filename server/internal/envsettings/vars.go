package envsettings

// honoured lists the variables that fill s, with envoy's defaults.
func honoured(s *Settings) []variable {
	return []variable{
		{"HOST", "0.0.0.0", str(&s.Host)},
		{"PORT", "8080", integer(&s.Port)},
		{"DEBUG_HOST", "0.0.0.0", str(&s.DebugHost)},
		{"DEBUG_PORT", "6070", integer(&s.DebugPort)},
		{"GRPC_UDS", "", str(&s.GRPCUDS)},
		{"GRPC_HOST", "0.0.0.0", str(&s.GRPCHost)},
		{"GRPC_PORT", "8081", integer(&s.GRPCPort)},
		{"GRPC_MAX_CONNECTION_AGE", "24h", duration(&s.GRPCMaxConnectionAge)},
		{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", duration(&s.GRPCMaxConnectionAgeGrace)},
		{"GRPC_SERVER_USE_TLS", "false", boolean(&s.GRPCServerUseTLS)},
		{"GRPC_SERVER_TLS_CERT", "", str(&s.GRPCServerTLSCert)},
		{"GRPC_SERVER_TLS_KEY", "", str(&s.GRPCServerTLSKey)},
		{"GRPC_CLIENT_TLS_CACERT", "", str(&s.GRPCClientTLSCACert)},
		{"GRPC_CLIENT_TLS_SAN", "", str(&s.GRPCClientTLSSAN)},
		{"LOG_LEVEL", "WARN", str(&s.LogLevel)},
		{"LOG_FORMAT", "text", str(&s.LogFormat)},
		{"CONFIG_TYPE", "FILE", str(&s.ConfigType)},
		{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", boolean(&s.ForceStartWithoutInitialConfig)},
		{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", boolean(&s.HealthyWithAtLeastOneConfigLoaded)},
		{"RUNTIME_ROOT", "/srv/runtime_data/current", str(&s.RuntimeRoot)},
		{"RUNTIME_SUBDIRECTORY", "", str(&s.RuntimeSubdirectory)},
		{"RUNTIME_APPDIRECTORY", "config", str(&s.RuntimeAppDirectory)},
		{"RUNTIME_IGNOREDOTFILES", "false", boolean(&s.RuntimeIgnoreDotFiles)},
		{"RUNTIME_WATCH_ROOT", "true", boolean(&s.RuntimeWatchRoot)},
		{"CONFIG_GRPC_XDS_NODE_ID", "default", str(&s.XDSNodeID)},
		{"CONFIG_GRPC_XDS_NODE_METADATA", "", str(&s.XDSNodeMetadata)},
		{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", str(&s.XDSServerURL)},
		{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", duration(&s.XDSServerConnectRetry)},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", mapping(&s.XDSClientAdditionalHeaders)},
		{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", boolean(&s.XDSServerUseTLS)},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", str(&s.XDSClientTLSCert)},
		{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", str(&s.XDSClientTLSKey)},
		{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", str(&s.XDSServerTLSCACert)},
		{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", str(&s.XDSServerTLSSAN)},
		{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", duration(&s.XDSBackoffInitialInterval)},
		{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", duration(&s.XDSBackoffMaxInterval)},
		{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", float(&s.XDSBackoffRandomFactor)},
		{"XDS_CLIENT_BACKOFF_JITTER", "true", boolean(&s.XDSBackoffJitter)},
		{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", integer(&s.XDSMaxMsgSizeInBytes)},
		{"USE_PROMETHEUS", "false", boolean(&s.UsePrometheus)},
		{"PROMETHEUS_ADDR", ":9090", str(&s.PrometheusAddr)},
		{"PROMETHEUS_PATH", "/metrics", str(&s.PrometheusPath)},
		{"CACHE_KEY_PREFIX", "", str(&s.CacheKeyPrefix)},
		{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", boolean(&s.StopCacheKeyIncrementWhenOverlimit)},
		{"SHADOW_MODE", "false", boolean(&s.ShadowMode)},
		{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", boolean(&s.LimitResponseHeadersEnabled)},
		{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", str(&s.LimitLimitHeader)},
		{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", str(&s.LimitRemainingHeader)},
		{"LIMIT_RESET_HEADER", "RateLimit-Reset", str(&s.LimitResetHeader)},
		{"REDIS_SOCKET_TYPE", "unix", str(&s.RedisSocketType)},
		{"REDIS_TYPE", "SINGLE", str(&s.RedisType)},
		{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", str(&s.RedisURL)},
		{"REDIS_POOL_SIZE", "10", integer(&s.RedisPoolSize)},
		{"REDIS_AUTH", "", str(&s.RedisAuth)},
		{"REDIS_TLS", "false", boolean(&s.RedisTLS)},
		{"REDIS_TLS_CLIENT_CERT", "", str(&s.RedisTLSClientCert)},
		{"REDIS_TLS_CLIENT_KEY", "", str(&s.RedisTLSClientKey)},
		{"REDIS_TLS_CACERT", "", str(&s.RedisTLSCACert)},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", boolean(&s.RedisTLSSkipHostnameVerification)},
		{"REDIS_SENTINEL_AUTH", "", str(&s.RedisSentinelAuth)},
		{"REDIS_TIMEOUT", "10s", duration(&s.RedisTimeout)},
		{"TRACING_ENABLED", "false", boolean(&s.TracingEnabled)},
		{"TRACING_SERVICE_NAME", "RateLimit", str(&s.TracingServiceName)},
		{"TRACING_SERVICE_NAMESPACE", "", str(&s.TracingServiceNamespace)},
		{"TRACING_SERVICE_INSTANCE_ID", "", str(&s.TracingServiceInstanceID)},
		{"TRACING_EXPORTER_PROTOCOL", "http", str(&s.TracingExporterProtocol)},
		{"TRACING_SAMPLING_RATE", "1", float(&s.TracingSamplingRate)},
	}
}

// Why the rest are not needed.
const (
	whyStatsd    = "statsd is not spoken: metrics are native Prometheus, on /metrics or at PROMETHEUS_ADDR"
	whyMemcache  = "memcached is not a store: limits live in Redis, or in process without REDIS_URL"
	whyPerSecond = "no second Redis for per-second limits: every limit takes one round trip to one Redis"
	whyPipeline  = "not needed: calls are pipelined automatically, with no added delay while Redis is idle"
)

// ignored maps each variable with no counterpart to why.
var ignored = map[string]string{
	"USE_DOG_STATSD":            whyStatsd,
	"USE_DOG_STATSD_MOGRIFIERS": whyStatsd,
	"USE_STATSD":                whyStatsd,
	"STATSD_HOST":               whyStatsd,
	"STATSD_PORT":               whyStatsd,
	"STATS_FLUSH_INTERVAL":      "Prometheus scrapes the metrics; nothing is flushed",
	"EXTRA_TAGS":                "statsd tags: Prometheus's target labels do this job",
	"DISABLE_STATS":             "metrics cost nothing until scraped; they are always on",
	"PROMETHEUS_MAPPER_YAML":    "a statsd-exporter mapping: the metrics are native Prometheus series, with no mapping to apply",

	"EXPIRATION_JITTER_MAX_SECONDS": "each key expires once its state is back to full, so expiries are already spread by key",
	"LOCAL_CACHE_SIZE_IN_BYTES":     "not needed: one Redis round trip per call",
	"NEAR_LIMIT_RATIO":              "feeds envoy's near_limit statsd counter only",
	"BACKEND_TYPE":                  "the store is Redis when REDIS_URL is set, else in process; " + whyMemcache,
	"MERGE_DOMAIN_CONFIG":           "one domain must be in one file: a second file with the same domain is an error",
	"QUOTA_MODE":                    "quota mode's dynamic metadata is not written",
	"RESPONSE_DYNAMIC_METADATA":     "dynamic metadata is not written",

	"REDIS_PIPELINE_WINDOW":                  whyPipeline,
	"REDIS_PIPELINE_LIMIT":                   whyPipeline,
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":           "the pool waits for a connection within the call's deadline, as envoy's WAIT",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":   "readiness always follows Redis: /readyz and gRPC health PING it every second",
	"REDIS_PERSECOND":                        whyPerSecond,
	"REDIS_PERSECOND_SOCKET_TYPE":            whyPerSecond,
	"REDIS_PERSECOND_TYPE":                   whyPerSecond,
	"REDIS_PERSECOND_URL":                    whyPerSecond,
	"REDIS_PERSECOND_POOL_SIZE":              whyPerSecond,
	"REDIS_PERSECOND_AUTH":                   whyPerSecond,
	"REDIS_PERSECOND_TLS":                    whyPerSecond,
	"REDIS_PERSECOND_SENTINEL_AUTH":          whyPerSecond,
	"REDIS_PERSECOND_PIPELINE_WINDOW":        whyPerSecond,
	"REDIS_PERSECOND_PIPELINE_LIMIT":         whyPerSecond,
	"REDIS_PERSECOND_TIMEOUT":                whyPerSecond,
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR": whyPerSecond,

	"MEMCACHE_HOST_PORT":                      whyMemcache,
	"MEMCACHE_MAX_IDLE_CONNS":                 whyMemcache,
	"MEMCACHE_SRV":                            whyMemcache,
	"MEMCACHE_SRV_REFRESH":                    whyMemcache,
	"MEMCACHE_TLS":                            whyMemcache,
	"MEMCACHE_TLS_CLIENT_CERT":                whyMemcache,
	"MEMCACHE_TLS_CLIENT_KEY":                 whyMemcache,
	"MEMCACHE_TLS_CACERT":                     whyMemcache,
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION": whyMemcache,

	// Not envoy's: Envoy Gateway sets it, and envoy reads nothing by this
	// name, so a client certificate is asked for only with
	// GRPC_CLIENT_TLS_CACERT, there as here.
	"GRPC_SERVER_TLS_CA_CERT": "not read by envoyproxy/ratelimit either: client certificates are required only with GRPC_CLIENT_TLS_CACERT",
}

// own lists the variables of ratekeeper-server's own that fill s, for
// where only the environment is set, as under Envoy Gateway, and the
// OpenTelemetry SDK's endpoint, which the log names.
func own(s *Settings) []variable {
	return []variable{
		{"RATEKEEPER_REFUNDS", "false", strict(&s.Refunds)},
		{"RATEKEEPER_LEASES", "0", ttl(&s.Leases)},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "", str(&s.TracingEndpoint)},
	}
}
