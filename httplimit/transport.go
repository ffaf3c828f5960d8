package httplimit

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// A TransportOption configures Transport.
type TransportOption interface{ applyTransport(*transport) }

type transportOptionFunc func(*transport)

func (f transportOptionFunc) applyTransport(t *transport) { f(t) }

// PerHost keys each outbound request on the host it goes to,
// "host:api.example.com" (with the port, if the URL has one): every
// remote API has a budget of its own. It is Transport's default.
func PerHost() TransportOption {
	return WithRequestKey(func(r *http.Request) (string, error) {
		if r.URL == nil || r.URL.Host == "" {
			return "", errors.New("httplimit: the request has no host")
		}
		return "host:" + strings.ToLower(r.URL.Host), nil
	})
}

// FixedKey keys every outbound request on key: one budget for all that
// the client sends, whatever the host, such as a quota of the account
// the client calls several hosts with.
func FixedKey(key string) TransportOption {
	return WithRequestKey(func(*http.Request) (string, error) { return key, nil })
}

// WithRequestKey keys each outbound request by f. An error fails the
// request before anything is sent.
func WithRequestKey(f func(*http.Request) (string, error)) TransportOption {
	return transportOptionFunc(func(t *transport) {
		if f != nil {
			t.key = f
		}
	})
}

// WithRequestCost sets the cost of each outbound request (default: 1),
// such as the units a remote API bills it at. An error fails the request
// before anything is sent; a cost of 0 sends it without waiting.
func WithRequestCost(f func(*http.Request) (int64, error)) TransportOption {
	return transportOptionFunc(func(t *transport) { t.cost = f })
}

// WithRetryAfterCharge makes a 429 Too Many Requests or a 503 Service
// Unavailable with a Retry-After field charge the shared limiter for the
// time the remote asked for, so that every process sharing the key backs
// off, not just the one that was told. See Transport.
func WithRetryAfterCharge() TransportOption {
	return transportOptionFunc(func(t *transport) { t.chargeRetryAfter = true })
}

// Transport returns an http.RoundTripper that keeps what base sends under
// lim, for a client of someone else's rate limit: a fleet calling an API
// with a quota of 100 requests a second shares one limiter of that rate
// (over Redis), and together the processes stay under it, each getting
// what the others leave.
//
//	client := &http.Client{Transport: httplimit.Transport(lim, http.DefaultTransport, httplimit.PerHost())}
//
// Before each request, Transport waits for the request's cost under its
// key (see PerHost, FixedKey, WithRequestKey and WithRequestCost) with
// lim.WaitN and the request's context; if the context ends first, or its
// deadline comes before the wait would end, the request is not sent, and
// the context's error is returned (one matching
// context.DeadlineExceeded for a deadline). A nil base is
// http.DefaultTransport.
//
// With WithRetryAfterCharge, a response 429 or 503 whose Retry-After
// asks for a wait d charges the key what the policy admits over d, on top
// of all it holds now: the key is drained, and in debt by what d repays,
// so no process of the fleet sends under it before d has passed (for a
// continuous policy, GCRA or a sliding window, to the request; for a
// token bucket, to its refill step; a fixed window forgets a debt at its
// end). The amount is Limit × d / Window of the policy (for a
// ratekeeper.All, of the policy that repays it first), bounded by the
// most a key can owe (see ratekeeper.Limiter.Charge). The response is
// returned as it is: retrying is the caller's choice.
//
// Transport panics if lim is nil.
func Transport(lim *ratekeeper.Limiter, base http.RoundTripper, opts ...TransportOption) http.RoundTripper {
	if lim == nil {
		panic("httplimit: Transport with a nil Limiter")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	t := &transport{lim: lim, base: base}
	PerHost().applyTransport(t)
	for _, opt := range opts {
		if opt != nil {
			opt.applyTransport(t)
		}
	}
	return t
}

type transport struct {
	lim              *ratekeeper.Limiter
	base             http.RoundTripper
	key              func(*http.Request) (string, error)
	cost             func(*http.Request) (int64, error)
	chargeRetryAfter bool
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	key, err := t.key(r)
	if err == nil && key == "" {
		err = errors.New("httplimit: empty rate limit key")
	}
	if err != nil {
		return nil, closeBody(r, err)
	}
	cost := int64(1)
	if t.cost != nil {
		if cost, err = t.cost(r); err != nil {
			return nil, closeBody(r, err)
		}
	}
	if err := t.lim.WaitN(r.Context(), key, cost); err != nil {
		if ctxErr := r.Context().Err(); ctxErr != nil {
			err = ctxErr
		}
		return nil, closeBody(r, err)
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil || !t.chargeRetryAfter {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			// Charged even if the caller has gone: the fleet must still
			// back off.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), DefaultStoreTimeout)
			defer cancel()
			t.drain(ctx, key, d)
		}
	}
	return resp, nil
}

// closeBody closes r's body, as a RoundTripper must even when it fails,
// and returns err.
func closeBody(r *http.Request, err error) error {
	if r.Body != nil {
		r.Body.Close()
	}
	return err
}

// drain charges key all it holds now, and what lim's policy admits over
// d: a key that held R, charged R + n - 1 where the policy admits n over
// d, admits its next request after d. One charge takes the same from
// every policy of an All, so the one that drains for the least is
// charged: it alone blocks the key until then.
func (t *transport) drain(ctx context.Context, key string, d time.Duration) {
	res, err := t.lim.Peek(ctx, key)
	if err != nil {
		return
	}
	parts := res.Parts
	if parts == nil {
		parts = []ratekeeper.Result{res}
	}
	charge := math.Inf(1)
	for i, p := range t.lim.Spec().Policies() {
		if w := p.Window(); w > 0 && i < len(parts) {
			n := math.Ceil(float64(p.Limit()) * float64(d) / float64(w))
			charge = min(charge, math.Ceil(max(parts[i].Remaining, 0))+n-1)
		}
	}
	if charge >= 1 && !math.IsInf(charge, 1) {
		t.lim.Charge(ctx, key, int64(min(charge, float64(ratekeeper.MaxLimit))))
	}
}

// parseRetryAfter reads a Retry-After value (RFC 9110): delay-seconds, or
// an HTTP-date after now.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0, false
		}
		return time.Duration(min(s, int64(ratekeeper.MaxPeriod/time.Second))) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil || !at.After(now) {
		return 0, false
	}
	return min(at.Sub(now), ratekeeper.MaxPeriod), true
}
