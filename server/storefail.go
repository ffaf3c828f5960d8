package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper/driver"
)

// OnStoreError says how the service answers when its store fails.
type OnStoreError int

const (
	// FailUnavailable answers the gRPC status UNAVAILABLE (and HTTP 503),
	// so that Envoy's failure_mode_deny setting decides.
	FailUnavailable OnStoreError = iota
	// FailAllow answers OK, as if no limit applied.
	FailAllow
	// FailDeny answers OVER_LIMIT for every limited descriptor.
	FailDeny
)

// ParseOnStoreError reads the -on-store-error flag: "unavailable",
// "allow" or "deny".
func ParseOnStoreError(s string) (OnStoreError, error) {
	switch s {
	case "", "unavailable":
		return FailUnavailable, nil
	case "allow":
		return FailAllow, nil
	case "deny":
		return FailDeny, nil
	}
	return 0, fmt.Errorf("on-store-error must be unavailable, allow or deny, not %q", s)
}

// DefaultStoreTimeout is the longest the store may take to decide a
// request, when the caller allows more: a decision later than this is of
// no use to a proxy holding its request.
const DefaultStoreTimeout = 500 * time.Millisecond

// storeShare is the part of a caller's remaining deadline the store may
// take: the rest is left to answer by OnStoreError when the store hangs.
const storeShare = 0.75

// ErrStoreUnavailable is matched by the error of a decision the store
// failed. Its text is all a caller sees: the store's own error, with
// Redis's address and the keys, goes to the log.
var ErrStoreUnavailable = errors.New("the rate limit store is unavailable")

// storeError is a store's failure as callers see it: ErrStoreUnavailable's
// text, matching both it and the store's error (a context's end, say).
type storeError struct{ err error }

func (e storeError) Error() string   { return ErrStoreUnavailable.Error() }
func (e storeError) Unwrap() []error { return []error{ErrStoreUnavailable, e.err} }

// fallbackCode is the code of limited descriptors when the store fails.
func (s *Service) fallbackCode() rlsv3.RateLimitResponse_Code {
	if s.opts.OnStoreError == FailDeny {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// decideInBudget decides ds within the store's budget. A budget spent
// is a store failure like any other, which must not read as the caller's
// DEADLINE_EXCEEDED, since the caller's deadline has not passed.
func (s *Service) decideInBudget(ctx context.Context, ds []descriptor) error {
	budget := s.storeBudget(ctx)
	storeCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	err := s.decide(storeCtx, ds)
	// A connection's read deadline, set to the budget's, may fire before
	// the context's timer does: storeCtx may not have ended yet.
	if err != nil && ctx.Err() == nil && (storeCtx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
		spent := fmt.Errorf("the store did not answer within %v: %v", budget, err)
		if errors.Is(err, driver.ErrPartlyApplied) {
			return partlyApplied{spent}
		}
		return spent
	}
	return err
}

// partlyApplied is an error that matches driver.ErrPartlyApplied, and no
// other: its text says so already.
type partlyApplied struct{ error }

func (partlyApplied) Unwrap() error { return driver.ErrPartlyApplied }

// storeBudget is how long the store may take to decide a request: the
// lesser of StoreTimeout and three quarters of the caller's remaining
// deadline, so that a store that hangs (a paused Redis) leaves the
// service time to answer by OnStoreError before the caller gives up.
func (s *Service) storeBudget(ctx context.Context) time.Duration {
	budget := s.opts.StoreTimeout
	if deadline, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Duration(float64(time.Until(deadline))*storeShare))
	}
	return budget
}
