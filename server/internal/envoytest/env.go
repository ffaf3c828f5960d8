package envoytest

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// StartRatekeeperEnv runs ratekeeper-server as StartEnvoy runs envoy's
// service, in envoy's environment: no flags, the same variables (the
// Redis at redisAddr, the configuration files configYAML under
// RUNTIME_ROOT), env adding to them or overriding them. So it runs as it
// runs where envoy's image is replaced by it, and answers as envoy's
// does there unless told otherwise. It waits until /readyz answers 200,
// and stops it when t ends.
func StartRatekeeperEnv(t testing.TB, redisAddr string, configYAML map[string]string, env ...string) Addrs {
	t.Helper()
	return startRatekeeperEnv(t, redisAddr, append(runtimeConfig(t, configYAML), env...))
}

// StartRatekeeperXDSEnv runs ratekeeper-server as StartEnvoyXDS runs
// envoy's service, in envoy's environment (no flags), configured over
// xDS by the server x names, as Envoy Gateway runs it. env adds to its
// variables.
func StartRatekeeperXDSEnv(t testing.TB, redisAddr string, x XDS, env ...string) Addrs {
	t.Helper()
	return startRatekeeperEnv(t, redisAddr, append(x.vars(), env...))
}

// startRatekeeperEnv runs ratekeeper-server with no flags and envoy's
// variables as StartEnvoy sets them, env added.
func startRatekeeperEnv(t testing.TB, redisAddr string, env []string) Addrs {
	t.Helper()
	bin := serverBinary(t)
	prefix := fmt.Sprintf("envoytest-rk:%d:%d:", os.Getpid(), time.Now().UnixNano())
	return launch(t, "ratekeeper-server", 3, func(ports []int) (*process, Addrs, string, error) {
		addrs, vars := envoyVars(ports, redisAddr, prefix)
		p, err := startProcess("ratekeeper-server", bin, nil, append(vars, env...))
		return p, addrs, addrs.URL("/readyz"), err
	})
}
