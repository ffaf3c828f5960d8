package xds

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/ratekeeper/ratekeeper/server/internal/certs"
)

// ParseNodeMetadata reads CONFIG_GRPC_XDS_NODE_METADATA as envoy reads
// it: key=value pairs separated by commas, the value running to the next
// comma. An entry without "=" is skipped, as envoy skips it; ignored lists
// them, for the caller to warn about.
func ParseNodeMetadata(s string) (md map[string]string, ignored []string) {
	md = map[string]string{}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			if e != "" {
				ignored = append(ignored, e)
			}
			continue
		}
		md[k] = v
	}
	return md, ignored
}

// ParseHeaders reads CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS as envoy
// reads it (a map of its settings library): key:value pairs separated by
// commas. An entry without ":" is an error, as it is to envoy.
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	if s == "" {
		return h, nil
	}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, ":")
		if !ok {
			return nil, fmt.Errorf("header %q: want key:value", e)
		}
		h[k] = v
	}
	return h, nil
}

// TLSFiles returns an Options.TLS for envoy's CONFIG_GRPC_XDS_* TLS
// settings: a client certificate and its key (both, or neither, for a
// server that asks for none), a CA that signs the server's certificate,
// added to the system's (none: the system's only), and san, the name the
// server's certificate must hold (none: the host of Options.Server). It
// is the service's one TLS client configuration (see certs.ClientConfig):
// the files are read now, so that a mistake (a certificate expired or
// not yet valid among them) fails at start, and again at a handshake
// when they changed, so that certificates rotated in place are used
// without a restart; a client certificate that does not load, or is
// outside its validity, is refused, the previous one kept, and onError,
// if not nil, told once per change of the files.
func TLSFiles(certFile, keyFile, caFile, san string, onError func(error)) (func() (*tls.Config, error), error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("xds: TLS: give the client certificate and its key, or neither")
	}
	cfg, err := certs.ClientConfig(certs.ClientFiles{Cert: certFile, Key: keyFile, CA: caFile, WithSystemCAs: true, ServerName: san}, onError)
	if err != nil {
		return nil, fmt.Errorf("xds: TLS: %w", err)
	}
	return func() (*tls.Config, error) { return cfg.Clone(), nil }, nil
}
