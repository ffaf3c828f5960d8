package server

import (
	"errors"
	"fmt"
	"time"
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
