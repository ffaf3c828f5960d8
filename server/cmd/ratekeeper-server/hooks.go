package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/config"
)

// A configSource feeds the service its configurations, of one
// CONFIG_TYPE, until ctx ends: each one through sink.load, each failure
// through sink.fail. It returns an error only when it cannot go on.
type configSource func(ctx context.Context, s *settings, sink *configSink) error

// configSources are the configuration types this build knows. Optional
// sources register themselves from their own files' init functions.
var configSources = map[string]configSource{"FILE": fileSource}

// sourceNames lists configSources' keys, in order.
func sourceNames() []string {
	var names []string
	for n := range configSources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// errInitialConfig is a first configuration that did not load, without
// FORCE_START_WITHOUT_INITIAL_CONFIG; its errors are logged.
var errInitialConfig = errors.New("invalid configuration")

// fileSource reads the file or directory of -config, then watches it.
func fileSource(ctx context.Context, s *settings, sink *configSink) error {
	cfg, err := config.Load(s.config)
	switch {
	case err == nil:
		if err := sink.load(cfg); err != nil && !s.forceStart {
			return errInitialConfig
		}
	case !s.forceStart:
		for _, e := range config.Errors(err) {
			sink.logger.Error("invalid configuration", "err", e)
		}
		return errInitialConfig
	default:
		sink.fail(err)
	}
	return config.Watch(ctx, s.config, func(c *config.Config) { _ = sink.load(c) }, sink.fail)
}

// configSink applies configurations to the service, counts and logs
// failures, and tracks what health depends on.
type configSink struct {
	svc     *server.Service
	metrics *server.Metrics
	logger  *slog.Logger
	origin  string // where configurations come from, for the log

	once      sync.Once
	first     chan struct{} // closed once the first configuration was handled
	hasDomain atomic.Bool   // the last one applied has a domain
}

func newConfigSink(svc *server.Service, metrics *server.Metrics, logger *slog.Logger, origin string) *configSink {
	return &configSink{svc: svc, metrics: metrics, logger: logger, origin: origin, first: make(chan struct{})}
}

// load applies c, or reports why not; the previous configuration then
// keeps serving.
func (k *configSink) load(c *config.Config) error {
	err := k.apply(c)
	if err != nil {
		k.metrics.ReloadFailed()
		k.logger.Error("configuration not applied; keeping the previous one", "err", err)
	}
	return err
}

// started lets the service serve, before any configuration is applied:
// a source calls it once its first configuration was handled, whether
// applied or not.
func (k *configSink) started() { k.once.Do(func() { close(k.first) }) }

// apply makes c the service's configuration, or returns why not, for the
// caller to report.
func (k *configSink) apply(c *config.Config) error {
	if err := k.svc.SetConfig(c); err != nil {
		return err
	}
	k.hasDomain.Store(len(c.Domains()) > 0)
	msg := "configuration reloaded"
	if k.svc.Generation() == 1 {
		msg = "configuration loaded"
	}
	k.started()
	k.logger.Info(msg, "from", k.origin, "generation", k.svc.Generation(), "domains", len(c.Domains()))
	for _, w := range c.Warnings() {
		k.logger.Warn("configuration: ignored", "warning", w)
	}
	return nil
}

// fail reports a configuration that did not load.
func (k *configSink) fail(err error) {
	k.metrics.ReloadFailed()
	for _, e := range config.Errors(err) {
		k.logger.Error("invalid configuration; keeping the previous one", "err", e)
	}
}

// A hook adds an optional part to the service (tracing, for one), from
// its own file's init function. It returns nil parts when its settings
// leave it off.
type hook func(ctx context.Context, s *settings, logger *slog.Logger) (*hookParts, error)

// hookParts are what a hook adds.
type hookParts struct {
	grpcOptions []grpc.ServerOption
	wrapStore   func(server.Store) server.Store
	wrapHTTP    func(http.Handler) http.Handler
	// close is called at shutdown, with a deadline.
	close func(context.Context) error
}

// hooks are the optional parts of this build.
var hooks []hook
