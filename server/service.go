package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/server/config"
)

// Store is what the service decides with: a ratekeeper.Store that also
// decides several keys at once, all or nothing. redisstore.Store and
// memstore.Store are both, as is either wrapped by metrics.Wrap.
type Store interface {
	ratekeeper.Store
	driver.MultiDecider
}

// Options configure a Service.
type Options struct {
	// Shadow puts every rule in shadow mode: requests are decided and
	// counted, but always answered OK.
	Shadow bool
	// OnStoreError is the answer when the store fails.
	OnStoreError OnStoreError
	// ResponseHeaders adds the IETF RateLimit-Policy and RateLimit header
	// fields to every response with a limit, for Envoy to pass on to the
	// client.
	ResponseHeaders bool
	// LimitHeaders, when not nil, adds envoyproxy/ratelimit's three
	// header fields (LIMIT_RESPONSE_HEADERS_ENABLED) under these names.
	LimitHeaders *LimitHeaders
	// DeniedHits says what the descriptors of a denied request take:
	// nothing (the zero value, ratekeeper's), or their hits as envoy
	// counts them (see DeniedHits).
	DeniedHits DeniedHits
	// CountOverLimit makes every rule count its hits over the limit, as
	// a rule's count_over_limit does.
	CountOverLimit bool
	// Refunds lets every rule's descriptors give hits back, as a rule's
	// refunds does. Where refunds are off, Envoy's is_negative_hits is
	// ignored, as envoyproxy/ratelimit ignores it (the hits are taken as
	// any request's), and /v1/decide's mode refund is refused; both are
	// counted in ratekeeper_server_refunds_refused_total. Where they are
	// on, one refund gives back at most what one request of the rule may
	// take (its capacity), and never more than the limit holds when full.
	Refunds bool
	// Metrics receives the service's measures; nil records none.
	Metrics *Metrics
	// Logger receives store errors (rate limited) and configuration
	// changes; nil discards them.
	Logger *slog.Logger
	// Clock is the service's time, for the end of an aligned window the
	// store has no state for, and for rate limiting the error log; nil is
	// time.Now. Decisions take the store's time, never this one.
	Clock func() time.Time
	// StoreTimeout bounds the store's part of a decision (see
	// storeBudget); 0 is DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Leases, when above 0, has every rule whose algorithm takes leases
	// and that sets none of its own (config.Rule.Lease) decide its
	// descriptor's takes from leases of this TTL (see
	// ratekeeper.WithLeases), all or nothing with the other descriptors
	// of a request. The store must take leases (a driver.Leaser).
	Leases time.Duration
}

// Service decides rate limit requests against a configuration. It is safe
// for concurrent use; SetConfig swaps the configuration atomically.
type Service struct {
	store Store
	opts  Options

	current atomic.Pointer[snapshot]
	gen     atomic.Uint64
	setMu   sync.Mutex // one SetConfig at a time swaps and retires

	overrides overrideCache
	errLog    errorLog
}

// snapshot is one configuration with everything the hot path needs
// prepared: each rule's validated spec and response fields.
type snapshot struct {
	cfg    *config.Config
	gen    uint64
	rules  map[*config.Rule]*rule
	labels *labelling // its metrics' labels
}

// ErrNoConfig is returned by Decide before any configuration is set.
var ErrNoConfig = errors.New("server: no rate limit configuration loaded")

// New returns a Service deciding with store. Give it a configuration with
// SetConfig before it decides.
func New(store Store, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	s := &Service{store: store, opts: opts}
	s.overrides.rules = map[overrideKey]*rule{}
	return s
}

// SetConfig makes cfg the configuration of every decision from now on.
// It fails, keeping the current one, if a rule's policy cannot be made
// into a limiter (config.Load has validated them, so this is a bug).
func (s *Service) SetConfig(cfg *config.Config) error {
	domains := cfg.Domains()
	snap := &snapshot{cfg: cfg, rules: map[*config.Rule]*rule{}, labels: s.opts.Metrics.labelling(domains)}
	for _, domain := range domains {
		for _, r := range cfg.Rules(domain) {
			compiled, err := s.compile(r, snap.labels)
			if err != nil {
				return err
			}
			snap.rules[r] = compiled
		}
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	snap.gen = s.gen.Add(1)
	if prev := s.current.Swap(snap); prev != nil {
		// Its leases go back once the requests still deciding with it
		// are done: they end within the store's budget.
		time.AfterFunc(2*s.opts.StoreTimeout, func() { prev.closeLeases() })
	}
	s.opts.Metrics.retire(snap.labels)
	s.opts.Metrics.configLoaded(snap.gen)
	return nil
}

// Close gives back what the current configuration's leases hold, for a
// service shutting down: it decides nothing with them afterwards.
func (s *Service) Close() error {
	if snap := s.current.Load(); snap != nil {
		return snap.closeLeases()
	}
	return nil
}

// closeLeases closes the Limiters of the snapshot's rules that take
// leases, giving back what they hold.
func (snap *snapshot) closeLeases() error {
	var errs []error
	for _, r := range snap.rules {
		if r.leased {
			errs = append(errs, r.lim.Close())
		}
	}
	return errors.Join(errs...)
}

// Generation returns the number of configurations set so far: 0 before
// the first.
func (s *Service) Generation() uint64 { return s.gen.Load() }

// Ready reports whether the service has a configuration.
func (s *Service) Ready() bool { return s.current.Load() != nil }

// maxHits bounds a descriptor's hits: costs are int64 in the library, and
// no limit is above ratekeeper.MaxLimit.
const maxHits = math.MaxUint32

// errInvalidRequest marks a request the service refuses to decide.
var errInvalidRequest = errors.New("invalid rate limit request")

// The endpoints a request comes through, the endpoint label of
// ratekeeper_server_refunds_refused_total.
const (
	endpointGRPC   = "grpc"
	endpointJSON   = "json"
	endpointDecide = "decide"
)

// Decide answers one rate limit request, as the gRPC API does. It returns
// an error wrapping errInvalidRequest for a request without a domain or
// descriptors, and the store's error when the store fails and
// OnStoreError is FailUnavailable.
func (s *Service) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, _, _, err := s.respond(ctx, req, endpointGRPC, nil)
	return resp, err
}

// respond decides req, come through endpoint, and answers it, as Decide,
// with its descriptors; fallback reports an answer made without the
// store. charges, when not nil, marks the descriptors that charge their
// hits whatever their rule says.
func (s *Service) respond(ctx context.Context, req *rlsv3.RateLimitRequest, endpoint string, charges []bool) (resp *rlsv3.RateLimitResponse, ds []descriptor, fallback bool, err error) {
	snap, ds, fallback, err := s.run(ctx, req, endpoint, charges)
	switch {
	case err != nil:
		return nil, nil, false, err
	case fallback:
		return s.answerWithout(ds, s.fallbackCode()), ds, true, nil
	}
	return s.answer(snap, req.GetDomain(), ds), ds, false, nil
}

// run resolves and decides a request's descriptors, charges marking
// those that charge (see respond). fallback reports a store failure that
// OnStoreError answers without the store.
func (s *Service) run(ctx context.Context, req *rlsv3.RateLimitRequest, endpoint string, charges []bool) (snap *snapshot, ds []descriptor, fallback bool, err error) {
	snap = s.current.Load()
	if snap == nil {
		return nil, nil, false, ErrNoConfig
	}
	if req.GetDomain() == "" {
		return nil, nil, false, fmt.Errorf("%w: rate limit domain must not be empty", errInvalidRequest)
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, nil, false, fmt.Errorf("%w: rate limit descriptor list must not be empty", errInvalidRequest)
	}
	ds, err = s.resolve(snap, req)
	if err != nil {
		return nil, nil, false, err
	}
	if err := s.judgeRefunds(snap, req.GetDomain(), endpoint, ds); err != nil {
		return nil, nil, false, err
	}
	for i, c := range charges {
		ds[i].charge = c
	}
	if err := s.decideInBudget(ctx, ds); err != nil {
		if errors.Is(err, driver.ErrTooManyRequests) {
			return nil, nil, false, fmt.Errorf("%w: %w", errInvalidRequest, err)
		}
		s.opts.Metrics.storeError(errors.Is(err, driver.ErrPartlyApplied))
		s.errLog.log(s.opts.Logger, s.opts.Clock(), err)
		if s.opts.OnStoreError == FailUnavailable || ctx.Err() != nil {
			return nil, nil, false, storeError{err}
		}
		return snap, ds, true, nil
	}
	return snap, ds, false, nil
}
