package grpclimit

import (
	"context"

	"google.golang.org/grpc"

	"github.com/ratekeeper/ratekeeper"
)

// An Adapter satisfies the Limiter interface of go-grpc-middleware v2's
// interceptors/ratelimit package, Limit(ctx) error, so that a chain built
// on it switches to ratekeeper in one line:
//
//	ratelimit.UnaryServerInterceptor(grpclimit.NewAdapter(lim))
//
// Its calls are keyed, priced and decided as UnaryServerInterceptor's
// are, and they get the same response header and pushback trailer. But
// go-grpc-middleware replaces the error of a denied call with a status of
// its own text, without its RetryInfo and QuotaFailure details, and its
// handlers see no decision in their context (Charge, Refund and
// WithRefundOn do nothing there): UnaryServerInterceptor and
// StreamServerInterceptor keep both.
type Adapter struct{ in *interceptor }

// NewAdapter returns an Adapter that limits calls with lim, configured by
// opts as the interceptors are (WithMessageCost and WithRefundOn aside).
// It panics if lim is nil.
func NewAdapter(lim *ratekeeper.Limiter, opts ...Option) *Adapter {
	return &Adapter{in: newInterceptor(lim, opts)}
}

// Limit decides the server call whose context is ctx: nil admits it, and
// an error, the status the interceptors would end it with, refuses it.
func (a *Adapter) Limit(ctx context.Context) error {
	method, _ := grpc.Method(ctx)
	_, err := a.in.admit(ctx, method, unaryHeader{ctx})
	return err
}
