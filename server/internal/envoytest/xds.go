package envoytest

import "testing"

// XDS names the xDS management server a service started by
// StartEnvoyXDS or StartRatekeeperXDS takes its configuration from.
type XDS struct {
	// Addr is the server's host:port.
	Addr string
	// NodeID is the node the service speaks as.
	NodeID string
	// ClientCert, ClientKey, CA and SAN set up mTLS: the client's
	// certificate and key, the CA of the server's certificate, and the
	// name it must hold. All empty: plaintext.
	ClientCert, ClientKey, CA, SAN string
}

// StartEnvoyXDS runs envoyproxy/ratelimit as StartEnvoy does, but in
// CONFIG_TYPE=GRPC_XDS_SOTW mode, configured by the server x names. It
// serves only once the server's first push is handled, so set a snapshot
// before. env adds to its settings.
func StartEnvoyXDS(t testing.TB, redisAddr string, x XDS, env ...string) Addrs {
	t.Helper()
	return startEnvoy(t, redisAddr, append(x.vars(), env...))
}

// vars are envoy's variables for configuration over xDS from x.
func (x XDS) vars() []string {
	vars := []string{
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=" + x.Addr,
		"CONFIG_GRPC_XDS_NODE_ID=" + x.NodeID,
	}
	if x.CA != "" {
		vars = append(vars,
			"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
			"CONFIG_GRPC_XDS_CLIENT_TLS_CERT="+x.ClientCert,
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY="+x.ClientKey,
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT="+x.CA,
			"CONFIG_GRPC_XDS_SERVER_TLS_SAN="+x.SAN)
	}
	return vars
}

// StartRatekeeperXDS runs ratekeeper-server as StartRatekeeper does, but
// configured over xDS by the server x names (-xds-server and its flags).
// Like envoy's service, it serves only once the first push is handled.
// args are added to its flags.
func StartRatekeeperXDS(t testing.TB, redisURL string, x XDS, args ...string) Addrs {
	t.Helper()
	flags := []string{"-xds-server", x.Addr, "-xds-node-id", x.NodeID}
	if x.CA != "" {
		flags = append(flags, "-xds-client-cert", x.ClientCert, "-xds-client-key", x.ClientKey,
			"-xds-server-ca", x.CA, "-xds-server-san", x.SAN)
	}
	return startRatekeeper(t, redisURL, append(flags, args...))
}
