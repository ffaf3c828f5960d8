package driver

import (
	"context"
	"errors"
	"fmt"
)

// Store decides requests for a Limiter and keeps the state of its keys:
// ratekeeper.Store is this interface. Implementations are safe for
// concurrent use, and make each decision atomically (redisstore in one
// Lua script call, memstore under a lock). A Limiter calls them with its
// ValidSpec, a key that passes CheckKey and a cost that passes CheckCost;
// other callers may not, so a store checks its input with CheckRequest.
// Decide returns by the end of ctx: one that has not decided by then
// returns ctx's error or one wrapping it, so that callers bound a decision
// by its context alone, without a goroutine of their own.
//
// A store may also implement the optional interfaces MultiDecider and
// Charger, which callers find by type assertion; a store that wraps
// another implements each exactly when the wrapped store does.
type Store interface {
	// Decide takes n from key under spec, all or nothing, and reports the
	// Decision. It consumes nothing when the request is denied, and
	// n = 0 only peeks.
	Decide(ctx context.Context, key string, spec *ValidSpec, n int64) (Decision, error)
	// Reset forgets key's state under spec, so the key starts full again.
	Reset(ctx context.Context, key string, spec *ValidSpec) error
}

// MultiDecider is a Store that decides requests on several keys together,
// all or nothing: if every request is allowed, each takes its N; if any
// is denied, none takes anything. A request of N 0 only looks, and denies
// the others only when its key is in debt (Remaining below zero). The
// i-th Decision is request i's own: allowed, in a batch that another
// request denied, it reports the state as a peek of cost N would, nothing
// taken. Requests are decided in order, and a state shared by two
// requests (one key under one policy) decides the second as if the first
// had taken. The requests pass CheckRequests, which the store checks; no
// request returns nil, nil.
//
// A request's Mode makes it an exception to all or nothing. A Charge
// always takes its N, as Charger.Charge does, and denies the others when
// N does not fit. A Refund always gives its N back, as Charger.Refund
// does, and never denies. A Take with ChargeOver denies the others when
// it does not fit, and then each of its policies that N does not fit is
// charged N. When a decision is denied and two requests share a state,
// the states are put back as they were, then the charges and refunds are
// made again, in order.
type MultiDecider interface {
	DecideAll(ctx context.Context, reqs []Request) ([]Decision, error)
}

// ErrPartlyApplied is matched by the error of a DecideAll that failed
// after some of its requests had changed their keys: a store that
// decides by several calls (redisstore on a Redis Cluster, one call per
// hash slot) cannot undo those that succeeded when another fails, as with
// a master down. It marks only what the store knows: a call that failed
// after it was sent (a timeout) may have been applied too. A store that
// decides in one atomic call never returns it.
var ErrPartlyApplied = errors.New("ratekeeper: some of the requests were applied before the decision failed")

// Charger is a Store that takes costs known only afterwards. Both take
// the parameters of Decide, and report a Decision as it does.
type Charger interface {
	// Charge takes n from key under spec whatever is left: the key may go
	// into a debt that time repays. Its Decision reports whether the
	// request would have been allowed.
	Charge(ctx context.Context, key string, spec *ValidSpec, n int64) (Decision, error)
	// Refund gives n back to key under spec, never above what the policy
	// holds.
	Refund(ctx context.Context, key string, spec *ValidSpec, n int64) (Decision, error)
}

// A Decision is a store's answer to one request, in the spec's integer
// units; ratekeeper makes a Result of it. ValidSpec.Decision makes one
// from the Outcomes of the spec's policies.
type Decision struct {
	// Outcome is the request's: for an All, its binding part's, with the
	// latest ResetAfter of all its parts.
	Outcome
	// Binding is the index in Parts of the binding part; 0 without Parts.
	Binding int
	// Parts holds an All's parts' Outcomes, in the order of its parts;
	// nil for any other spec.
	Parts []Outcome
}

// Decision returns the Decision of a request under v from out, the
// Outcomes of v's Policies() in order, which it copies. For an All, the
// request is allowed when every part allows it (after a Charge: when n
// fitted in every part), and the binding part is the one that holds the
// next request back the longest: the greatest RetryAfter (a denied take's
// wait for its own cost; after a Charge or a Refund, the wait of a
// request of cost 1, whether or not n fitted), a part that denies before
// one that allows, and else the least Remaining. The Decision is its
// Outcome, with the request's Allowed and the latest ResetAfter of all.
// When a take is denied, the parts that would have allowed it report
// their state as it is, since nothing was taken. out must hold
// max(v.NumParts(), 1) Outcomes.
func (v *ValidSpec) Decision(out []Outcome) Decision {
	if !v.IsAll() {
		return Decision{Outcome: out[0]}
	}
	parts := out[:len(v.parts)]
	allowed := true
	for _, p := range parts {
		allowed = allowed && p.Allowed
	}
	binding, resetAfter := 0, int64(0)
	for i, p := range parts {
		resetAfter = max(resetAfter, p.ResetAfter)
		if holdsLonger(p, parts[binding]) {
			binding = i
		}
	}
	d := Decision{Outcome: parts[binding], Binding: binding, Parts: append([]Outcome(nil), parts...)}
	d.Allowed, d.ResetAfter = allowed, resetAfter
	return d
}

// holdsLonger reports whether part p holds the next request back longer
// than part q: a longer wait, else a denial beside an allowance, else
// less left.
func holdsLonger(p, q Outcome) bool {
	switch {
	case p.RetryAfter != q.RetryAfter:
		return p.RetryAfter > q.RetryAfter
	case p.Allowed != q.Allowed:
		return !p.Allowed
	}
	return p.Remaining < q.Remaining
}

// MaxKeyLen is the longest key, in bytes, that a store is asked about.
const MaxKeyLen = 512

// Errors of the input checks, which ratekeeper exports under the same
// names. Test for them with errors.Is; the errors returned carry the
// details.
var (
	// ErrInvalidKey: a key is empty or longer than MaxKeyLen.
	ErrInvalidKey = errors.New("ratekeeper: invalid key")
	// ErrInvalidCost: a cost is negative or more than the policy can ever
	// admit. The latter also matches ErrCostTooHigh.
	ErrInvalidCost = errors.New("ratekeeper: invalid cost")
	// ErrCostTooHigh: a cost is larger than the policy can ever admit, so
	// waiting would not help.
	ErrCostTooHigh = errors.New("ratekeeper: cost exceeds what the policy can ever admit")
)

// CheckKey reports why key cannot be decided on, as an error matching
// ErrInvalidKey, or nil: keys are 1 to MaxKeyLen bytes.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key of %d bytes is longer than %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// CheckCost reports why a request of cost n cannot be decided under spec,
// as an error matching ErrInvalidCost (and ErrCostTooHigh above
// spec.MaxCost()), or nil: costs are 0 to spec.MaxCost(). The models and
// the scripts assume that range: out of it, they may admit more than the
// limit. spec must be Valid.
func CheckCost(spec *ValidSpec, n int64) error {
	switch {
	case n < 0:
		return fmt.Errorf("%w: negative cost %d", ErrInvalidCost, n)
	case n > spec.MaxCost():
		return costTooHighError{n: n, max: spec.MaxCost()}
	}
	return nil
}

// costTooHighError matches both ErrInvalidCost and ErrCostTooHigh.
type costTooHighError struct{ n, max int64 }

func (e costTooHighError) Error() string {
	return fmt.Sprintf("ratekeeper: cost %d can never be admitted: the policy admits at most %d at once", e.n, e.max)
}

func (e costTooHighError) Unwrap() []error { return []error{ErrInvalidCost, ErrCostTooHigh} }

// CheckSpec reports, as an error matching ErrInvalidSpec, a spec that was
// not made by Validate (or nil), which a store must not run.
func CheckSpec(spec *ValidSpec) error {
	if !spec.Valid() {
		return fmt.Errorf("%w: a spec not made by driver.Validate", ErrInvalidSpec)
	}
	return nil
}

// CheckRequest checks a store's input for a decision of cost n on key
// under spec: CheckSpec, CheckKey and CheckCost, in that order. A store
// calls it first, then CheckTime on the time it decides at.
func CheckRequest(key string, spec *ValidSpec, n int64) error {
	if err := CheckSpec(spec); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	return CheckCost(spec, n)
}

// Request is one key's part of a multi-key decision (see MultiDecider).
type Request struct {
	Key  string
	Spec *ValidSpec // may be an All spec
	N    int64      // 0 peeks this key (see MultiDecider)
	// Mode is what the request does with N, beside the others: Take
	// takes N only if every request of the decision is allowed; Charge
	// always takes N, and may go into debt; Refund always gives N back.
	// The zero Mode, Check, stands for Take here: a request looks only
	// with N = 0.
	Mode Mode
	// ChargeOver, with Take, charges N to each of the request's policies
	// that N does not fit, rather than taking nothing, while one that N
	// fits still takes nothing when another denies.
	ChargeOver bool
}

// Act returns what the request does: its Mode, with Check read as Take.
func (r Request) Act() Mode {
	if r.Mode == Check {
		return Take
	}
	return r.Mode
}

// Bounds of a multi-key decision, which one script call makes: about as
// long as a batch of the pipeliner's.
const (
	// MaxRequests is the most requests one DecideAll takes.
	MaxRequests = 64
	// MaxRequestPolicies is the most policies over all the requests of one
	// DecideAll, an All counting each of its parts.
	MaxRequestPolicies = 128
)

// ErrTooManyRequests is matched by the error of a DecideAll over more
// than MaxRequests requests, or MaxRequestPolicies policies.
var ErrTooManyRequests = errors.New("ratekeeper: too many requests in one decision")

// CheckRequests checks a multi-key decision for a store: at most
// MaxRequests requests, each of which passes CheckRequest (CheckCharge
// for a Charge or a Refund), with a Mode of its own, and at most
// MaxRequestPolicies policies in all. An error of CheckRequest comes back
// with the request's index; one of the bounds wraps ErrTooManyRequests.
func CheckRequests(reqs []Request) error {
	if len(reqs) > MaxRequests {
		return fmt.Errorf("%w: %d requests, at most %d", ErrTooManyRequests, len(reqs), MaxRequests)
	}
	policies := 0
	for i, r := range reqs {
		var err error
		switch m := r.Act(); {
		case m > Refund:
			err = fmt.Errorf("ratekeeper: invalid %s", m)
		case r.ChargeOver && m != Take:
			err = fmt.Errorf("ratekeeper: ChargeOver with %s: it applies to Take", m)
		case m == Take:
			err = CheckRequest(r.Key, r.Spec, r.N)
		default:
			err = CheckCharge(r.Key, r.Spec, r.N)
		}
		if err != nil {
			return fmt.Errorf("%w (request %d)", err, i)
		}
		policies += max(r.Spec.NumParts(), 1)
	}
	if policies > MaxRequestPolicies {
		return fmt.Errorf("%w: %d policies over %d requests, at most %d", ErrTooManyRequests, policies, len(reqs), MaxRequestPolicies)
	}
	return nil
}
