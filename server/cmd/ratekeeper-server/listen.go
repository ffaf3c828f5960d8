package main

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/ratekeeper/ratekeeper/server/internal/certs"
)

// handshakeTimeout bounds a gRPC connection's TLS and HTTP/2 handshake.
const handshakeTimeout = 10 * time.Second

// grpcOptions are the gRPC server's options: TLS when asked for, and the
// bounds of one connection.
func grpcOptions(s *settings, onCertError func(error)) ([]grpc.ServerOption, error) {
	opts := []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      s.conns.grpcMaxAge,
			MaxConnectionAgeGrace: s.conns.grpcMaxAgeGrace,
			MaxConnectionIdle:     s.conns.grpcMaxIdle,
		}),
		grpc.MaxConcurrentStreams(uint32(s.conns.grpcMaxStreams)),
		grpc.ConnectionTimeout(handshakeTimeout),
	}
	if c, err := grpcTLSConfig(s.grpcTLS, onCertError); err != nil {
		return nil, err
	} else if c != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c)))
	}
	return opts, nil
}

// grpcTLSConfig is the gRPC server's TLS, nil without a certificate.
func grpcTLSConfig(t grpcTLS, onCertError func(error)) (*tls.Config, error) {
	if t.cert == "" {
		return nil, nil
	}
	return certs.ServerConfig(certs.ServerFiles{Cert: t.cert, Key: t.key, ClientCA: t.clientCA, ClientSAN: t.clientSAN}, onCertError)
}

// certErrorLog logs a certificate, key or CA file refused on a reload,
// once per change of the files: the previous one keeps serving. A
// certificate outside its validity is logged with its file and dates.
func certErrorLog(logger *slog.Logger) func(error) {
	return func(err error) {
		const msg = "certificate not reloaded; keeping the previous one"
		if ve, ok := errors.AsType[*certs.ValidityError](err); ok {
			reason := "not valid yet"
			if ve.Expired() {
				reason = "expired"
			}
			logger.Error(msg, "reason", reason, "file", ve.File,
				"not_before", ve.NotBefore.UTC().Format(time.RFC3339), "not_after", ve.NotAfter.UTC().Format(time.RFC3339), "err", err)
			return
		}
		logger.Error(msg, "err", err)
	}
}

// httpServer serves h with the bounds of -http-*-timeout.
func httpServer(h http.Handler, c connLimits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(c.httpReadTimeout, 10*time.Second),
		ReadTimeout:       c.httpReadTimeout,
		WriteTimeout:      c.httpWriteTimeout,
		IdleTimeout:       c.httpIdleTimeout,
	}
}

// metricsHandler serves the registry in Prometheus's format.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// onPath serves h at path alone: 404 elsewhere. The path is envoy's
// PROMETHEUS_PATH as given, not a ServeMux pattern.
func onPath(path string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// debugHandler serves Go's profiles, as envoy's DEBUG_PORT does.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// listener is one of the service's listeners, opened before any serves.
type listener struct {
	name string
	ln   net.Listener
}

// listenAll opens each address, or none: on an error, those already open
// are closed.
func listenAll(addrs []struct{ name, network, addr string }) ([]listener, error) {
	var out []listener
	for _, a := range addrs {
		if a.addr == "" {
			out = append(out, listener{name: a.name})
			continue
		}
		ln, err := net.Listen(a.network, a.addr)
		if err != nil {
			for _, l := range out {
				if l.ln != nil {
					l.ln.Close()
				}
			}
			return nil, err
		}
		out = append(out, listener{a.name, ln})
	}
	return out, nil
}
