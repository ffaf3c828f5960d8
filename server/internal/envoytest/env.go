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
	config := runtimeConfig(t, configYAML)
	bin := serverBinary(t)
	prefix := fmt.Sprintf("envoytest-rk:%d:%d:", os.Getpid(), time.Now().UnixNano())
	return launch(t, "ratekeeper-server", 3, func(ports []int) (*process, Addrs, string, error) {
		addrs, vars := envoyVars(ports, redisAddr, prefix)
		vars = append(append(vars, config...), env...)
		p, err := startProcess("ratekeeper-server", bin, nil, vars)
		return p, addrs, addrs.URL("/readyz"), err
	})
}
