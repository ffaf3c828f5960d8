package grpclimit

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/ratekeeper/ratekeeper"
)

// An Option configures UnaryServerInterceptor, StreamServerInterceptor
// and NewAdapter.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// A FailurePolicy is an Option choosing what happens to calls while the
// limiter fails (its store returns an error, or no decision within the
// store timeout): FailOpen or FailClosed.
type FailurePolicy int

const (
	// FailOpen serves calls unlimited while the limiter fails. It is the
	// default: the limiter protects the service, and an outage of its
	// store should not become an outage of the service. The first failure
	// of each kind is logged at level Error, and the number of the others
	// when the limiter decides again.
	FailOpen FailurePolicy = iota
	// FailClosed ends calls with codes.Unavailable while the limiter
	// fails: for methods where an unlimited call costs more than a refused
	// one. Failures are logged as with FailOpen.
	FailClosed
)

func (p FailurePolicy) apply(c *config) { c.failClosed = p == FailClosed }

// A KeyFunc returns the rate limit key of a call to the full method
// ("/package.Service/Method") whose context is ctx: calls with the same
// key draw from the same bucket. An error means the call cannot be keyed,
// and ends it: with the error's status if it has one
// (status.Error(codes.Unauthenticated, ...), say), else with
// codes.InvalidArgument. A call is never limited under some shared key.
type KeyFunc func(ctx context.Context, fullMethod string) (string, error)

// A CostFunc returns the cost of a call, in units of its limiter's policy.
// An error ends the call as a KeyFunc's does. A cost of 0 makes a call
// free: it is served and reports the current state without consuming
// anything.
type CostFunc func(ctx context.Context, fullMethod string) (int64, error)

// A LimiterFunc chooses the limiter of a call: nil means the
// interceptor's own. Return limiters made once, not per call: the
// interceptor writes each one's ratelimit-policy field once, and keeps
// it for as long as the interceptor lives.
type LimiterFunc func(ctx context.Context, fullMethod string) *ratekeeper.Limiter

type config struct {
	key         KeyFunc
	cost        CostFunc
	msgCost     func(msg any) int64
	limiterFunc LimiterFunc
	limiters    []*ratekeeper.Limiter // of WithMethodLimiters, to make their fields at once
	failClosed  bool
	timeout     time.Duration
	logger      *slog.Logger
	exempt      func(ctx context.Context, fullMethod string) bool
	refund      map[codes.Code]bool
}

// WithKeyFunc sets how calls are keyed (default: ClientIP(), the peer's
// address). See ClientIP, MetadataKey, FullMethod and PerMethod, or write
// your own from the context (an authenticated user) and the method.
func WithKeyFunc(f KeyFunc) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.key = f
		}
	})
}

// WithCostFunc sets the cost of each call, or of each stream when it
// starts (default: 1).
func WithCostFunc(f CostFunc) Option {
	return optionFunc(func(c *config) { c.cost = f })
}

// WithMessageCost makes a stream take cost(msg) for every message it
// receives, under the key it was admitted with, as well as the cost of
// its start. A message denied ends RecvMsg with codes.ResourceExhausted
// (and its RetryInfo); one that cannot be decided follows the failure
// policy. cost = func(any) int64 { return 1 } counts messages; a cost of
// 0 takes nothing. Unary calls are not affected.
func WithMessageCost(cost func(msg any) int64) Option {
	return optionFunc(func(c *config) { c.msgCost = cost })
}

// WithLimiterFunc chooses each call's limiter by f, such as a stricter
// policy for expensive methods; where f returns nil, the interceptor's
// own limiter decides. It replaces WithMethodLimiters.
func WithLimiterFunc(f LimiterFunc) Option {
	return optionFunc(func(c *config) { c.limiterFunc, c.limiters = f, nil })
}

// WithMethodLimiters chooses each call's limiter by its full method
// ("/package.Service/Method") in m; methods not in m use the
// interceptor's own limiter. m is copied. It replaces WithLimiterFunc.
//
//	grpclimit.WithMethodLimiters(map[string]*ratekeeper.Limiter{
//		"/shop.Orders/Checkout": checkoutLimiter,
//	})
func WithMethodLimiters(m map[string]*ratekeeper.Limiter) Option {
	byMethod := make(map[string]*ratekeeper.Limiter, len(m))
	var limiters []*ratekeeper.Limiter
	for method, l := range m {
		if l != nil {
			byMethod[method] = l
			limiters = append(limiters, l)
		}
	}
	return optionFunc(func(c *config) {
		c.limiterFunc = func(_ context.Context, method string) *ratekeeper.Limiter { return byMethod[method] }
		c.limiters = limiters
	})
}

// WithStoreTimeout bounds the wait for each decision (default
// DefaultStoreTimeout); past it, the limiter has failed and the failure
// policy applies. d <= 0 removes it, leaving only the call's context.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithLogger sets the logger of limiter failures (level Error, the first
// of each kind) and of calls that cannot be limited (level Debug, as
// clients can cause them at will). The default is slog.Default() at the
// time of logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithExempt exempts the calls for which exempt returns true: they are
// served as they are, without a decision or rate limit fields. Use it for
// health checks and reflection:
//
//	grpclimit.WithExempt(func(_ context.Context, method string) bool {
//		return strings.HasPrefix(method, "/grpc.health.v1.Health/")
//	})
func WithExempt(exempt func(ctx context.Context, fullMethod string) bool) Option {
	return optionFunc(func(c *config) { c.exempt = exempt })
}

// WithRefundOn refunds the cost an admitted call or stream took when its
// handler ends it with one of statuses, so that such calls do not count:
// failures of the service, say, with
//
//	grpclimit.WithRefundOn(codes.Internal, codes.Unavailable)
//
// codes.OK refunds successful calls. What WithMessageCost took is not
// refunded. A refund that fails is logged; the call's status is not
// changed.
func WithRefundOn(statuses ...codes.Code) Option {
	return optionFunc(func(c *config) {
		c.refund = nil
		for _, code := range statuses {
			if c.refund == nil {
				c.refund = map[codes.Code]bool{}
			}
			c.refund[code] = true
		}
	})
}
