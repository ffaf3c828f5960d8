package grpclimit

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxAttempts is how many times UnaryClientInterceptor makes a call
// unless WithMaxAttempts says otherwise: the first try and two retries.
const DefaultMaxAttempts = 3

// DefaultMaxWait is the longest wait UnaryClientInterceptor makes for a
// call without a deadline, unless WithMaxWait says otherwise.
const DefaultMaxWait = 10 * time.Second

// A ClientOption configures UnaryClientInterceptor.
type ClientOption interface{ applyClient(*clientConfig) }

type clientOptionFunc func(*clientConfig)

func (f clientOptionFunc) applyClient(c *clientConfig) { f(c) }

type clientConfig struct {
	attempts int
	maxWait  time.Duration
}

// WithMaxAttempts bounds the number of times a call is made, the first
// included (default DefaultMaxAttempts); n < 1 is 1, which never retries.
func WithMaxAttempts(n int) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.attempts = max(n, 1) })
}

// WithMaxWait bounds each wait for a retry (default DefaultMaxWait): a
// RetryInfo asking for longer ends the call with its status, whatever
// the call's deadline.
func WithMaxWait(d time.Duration) ClientOption {
	return clientOptionFunc(func(c *clientConfig) { c.maxWait = d })
}

// UnaryClientInterceptor returns an interceptor that retries unary calls
// denied by a rate limit: a call that ends with codes.ResourceExhausted
// and a google.rpc.RetryInfo (as the server interceptors of this package
// send, and many services do) is made again once the RetryDelay has
// passed. It retries only when the wait ends before the call's deadline
// and within the longest wait (WithMaxWait), and at most
// WithMaxAttempts times in all; otherwise, or if the context ends while
// waiting, the call ends with the last status. Calls ending with any
// other status, or without a RetryInfo, are not retried. Install it only
// for methods that are safe to repeat: a denied call was not served, but
// the interceptor cannot know that of every server.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := clientConfig{attempts: DefaultMaxAttempts, maxWait: DefaultMaxWait}
	for _, opt := range opts {
		if opt != nil {
			opt.applyClient(&c)
		}
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		var timer *time.Timer
		for attempt := 1; ; attempt++ {
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			if err == nil || attempt >= c.attempts {
				return err
			}
			wait, ok := retryDelay(err)
			if !ok || wait > c.maxWait {
				return err
			}
			if deadline, has := ctx.Deadline(); has && time.Until(deadline) <= wait {
				return err
			}
			if timer == nil {
				timer = time.NewTimer(wait)
				defer timer.Stop()
			} else {
				timer.Reset(wait)
			}
			select {
			case <-ctx.Done():
				return err
			case <-timer.C:
			}
		}
	}
}

// retryDelay returns the RetryDelay of a ResourceExhausted status err.
func retryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().IsValid() {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}
