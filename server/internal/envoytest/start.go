package envoytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartEnvoy runs envoyproxy/ratelimit (see Binary) against the Redis at
// redisAddr (host:port) with the configuration files configYAML (file
// name, such as "domain.yaml", to content), waits until it answers, and
// stops it when t ends. env adds or overrides its settings, as
// "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true".
//
// It runs with its stats off, no watching of the configuration, a key
// prefix of its own and logs at the error level only.
func StartEnvoy(t testing.TB, redisAddr string, configYAML map[string]string, env ...string) Addrs {
	t.Helper()
	return startEnvoy(t, redisAddr, append(runtimeConfig(t, configYAML), env...))
}

// runtimeConfig writes the configuration files configYAML where the
// variables it returns, envoy's RUNTIME_*, say to read them.
func runtimeConfig(t testing.TB, configYAML map[string]string) []string {
	t.Helper()
	root := t.TempDir()
	const sub = "ratelimit"
	writeConfig(t, filepath.Join(root, sub, "config"), configYAML)
	return []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=" + sub, "RUNTIME_WATCH_ROOT=false"}
}

// startEnvoy runs envoy's service with the settings of StartEnvoy but
// its configuration's, env adding to them.
func startEnvoy(t testing.TB, redisAddr string, env []string) Addrs {
	t.Helper()
	bin := Binary(t)
	prefix := fmt.Sprintf("envoytest:%d:%d:", os.Getpid(), time.Now().UnixNano())
	return launch(t, "envoyproxy/ratelimit", 3, func(ports []int) (*process, Addrs, string, error) {
		addrs, vars := envoyVars(ports, redisAddr, prefix)
		// Later entries win: exec keeps the last value of a duplicated
		// variable.
		vars = append(vars, env...)
		p, err := startProcess("envoyproxy/ratelimit", bin, nil, vars)
		return p, addrs, addrs.URL("/healthcheck"), err
	})
}

// envoyVars are the environment StartEnvoy gives envoy's service, on
// ports (gRPC, HTTP, debug), and the addresses it then serves.
func envoyVars(ports []int, redisAddr, prefix string) (Addrs, []string) {
	addrs := Addrs{
		GRPC: "127.0.0.1:" + strconv.Itoa(ports[0]),
		HTTP: "127.0.0.1:" + strconv.Itoa(ports[1]),
	}
	return addrs, []string{
		"PATH=" + os.Getenv("PATH"),
		"HOST=127.0.0.1",
		"PORT=" + strconv.Itoa(ports[1]),
		"GRPC_HOST=127.0.0.1",
		"GRPC_PORT=" + strconv.Itoa(ports[0]),
		"DEBUG_HOST=127.0.0.1",
		"DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"USE_STATSD=false",
		"DISABLE_STATS=true", // else it logs every stat every 10 s
		"CACHE_KEY_PREFIX=" + prefix,
		"LOG_LEVEL=error",
	}
}

// StartRatekeeper runs ratekeeper-server, built from this module's
// cmd/ratekeeper-server once per test binary, against the Redis at
// redisURL with the configuration files configYAML (file name to
// content) in one directory, waits until /readyz answers 200, and stops it
// when t ends (SIGTERM, then SIGKILL after 10 s). args are added to its
// flags. It skips t while this module has no cmd/ratekeeper-server.
func StartRatekeeper(t testing.TB, redisURL string, configYAML map[string]string, args ...string) Addrs {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "config")
	writeConfig(t, dir, configYAML)
	return startRatekeeper(t, redisURL, append([]string{"-config", dir}, args...))
}

// startRatekeeper runs ratekeeper-server as StartRatekeeper does, but with
// the configuration that args name.
func startRatekeeper(t testing.TB, redisURL string, args []string) Addrs {
	t.Helper()
	bin := serverBinary(t)
	return launch(t, "ratekeeper-server", 2, func(ports []int) (*process, Addrs, string, error) {
		addrs := Addrs{
			GRPC: "127.0.0.1:" + strconv.Itoa(ports[0]),
			HTTP: "127.0.0.1:" + strconv.Itoa(ports[1]),
		}
		flags := append([]string{
			"-grpc-addr", addrs.GRPC,
			"-http-addr", addrs.HTTP,
			"-redis", redisURL,
		}, args...)
		// The server's own environment, but not a REDIS_URL that could
		// stand in for a missing -redis.
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "REDIS_URL=") {
				env = append(env, kv)
			}
		}
		p, err := startProcess("ratekeeper-server", bin, flags, env)
		return p, addrs, addrs.URL("/readyz"), err
	})
}
