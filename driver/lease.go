package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leases: a Limiter may take a lease of several units of a key at once,
// in one store call, and decide the key's later requests in process from
// it. What a lease holds counts as taken in the key's state until it is
// given back or expires there, and the refill never fills it, so the
// leased units spent later can never let more through than the policy's
// bound over any window.

// MaxLeaseTTL is the longest a lease may last in a store.
const MaxLeaseTTL = time.Minute

// MaxHolds is the most leases one key's state holds at once. A lease step
// that finds a key full takes the request's own cost, as a take would,
// and holds nothing more.
const MaxHolds = 64

// A Lease is units of a key taken from its state in a store, held until
// Expires on the store's clock. Expires identifies the lease when it is
// given back.
type Lease struct {
	// Units is what the lease holds for later requests: what it took but
	// the cost of the request that took it, which it spent at once.
	Units int64
	// Expires is when the store stops counting the lease, in
	// microseconds on its clock: the time it was taken plus its TTL, or,
	// for a fixed window, the window's end if that comes first.
	Expires int64
}

// A LeaseRequest is what a lease step does: it first gives back Back,
// of which Unused units were not spent, then takes a new lease of up to
// Want units, at least Min, for TTL.
type LeaseRequest struct {
	// Want is the most the new lease takes, the request's own cost
	// included; 0 takes none (the step only gives back).
	Want int64
	// Min is the cost of the request that asks for the lease: the step
	// takes at least Min, which the request spends at once, or nothing,
	// and answers for it as a take of Min would. 0 <= Min <= Want. With
	// Min 0 and Want above it, the lease is taken ahead of any request:
	// it holds at least 1 unit when 1 is there (and the key may hold
	// one more lease), and the answer is that of a take of 1.
	Min int64
	// TTL is how long the new lease lasts, in microseconds: 1 to
	// MaxLeaseTTL.
	TTL int64
	// Back is a lease given back first (the zero Lease for none), and
	// Unused how many of its Units were not spent: 0 <= Unused <=
	// Back.Units. A lease the store no longer counts (it expired there)
	// gives nothing back.
	Back   Lease
	Unused int64
}

// A LeaseGrant is a lease step's answer: the lease taken (the zero Lease
// when none), and the Decision for its request of cost Min, in the form
// of a take's: Allowed when the step took Min. Its Remaining does not
// count the units the new lease holds.
type LeaseGrant struct {
	Lease
	// Lasts is how long the store counts the lease from the step on, in
	// microseconds: Expires less the time of the step. A holder spends it
	// for less than that from when it sent the step, so that it stops
	// before the store does whatever the two clocks read.
	Lasts int64
	Decision
}

// A Leaser is a Store that takes and gives back leases: optional, as
// Charger is. A Limiter with leases needs its store to be one.
type Leaser interface {
	// Lease makes the lease step req for key under spec, atomically.
	Lease(ctx context.Context, key string, spec *ValidSpec, req LeaseRequest) (LeaseGrant, error)
}

// ErrNoLeases: a spec's algorithm takes no leases (or an All, which takes
// none). It wraps errors.ErrUnsupported.
var ErrNoLeases = fmt.Errorf("ratekeeper: the policy takes no leases: %w", errors.ErrUnsupported)

// Leases reports whether v's algorithm takes leases.
func (v *ValidSpec) Leases() bool { return v.alg != nil && v.alg.Lease != nil }

// CheckLease reports why the lease step req for key under spec cannot be
// made, or nil.
func CheckLease(key string, spec *ValidSpec, req LeaseRequest) error {
	if err := CheckSpec(spec); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	if !spec.Leases() {
		return fmt.Errorf("%w: %s", ErrNoLeases, spec.Algorithm())
	}
	switch {
	case req.Want < 0 || req.Min < 0 || req.Want > spec.MaxCost() || req.Min > req.Want:
		return fmt.Errorf("%w: a lease of %d to %d units under a policy of at most %d at once", ErrInvalidCost, req.Min, req.Want, spec.MaxCost())
	case req.Want > 0 && (req.TTL <= 0 || req.TTL > int64(MaxLeaseTTL/time.Microsecond)):
		return fmt.Errorf("ratekeeper: a lease TTL of %dµs is outside 1µs to %v", req.TTL, MaxLeaseTTL)
	case req.Unused < 0 || req.Unused > req.Back.Units || req.Back.Units > MaxLimit || req.Back.Expires < 0 || req.Back.Expires >= maxTimeMicros+int64(MaxLeaseTTL/time.Microsecond):
		return fmt.Errorf("%w: %d unused of a lease of %d given back", ErrInvalidCost, req.Unused, req.Back.Units)
	}
	return nil
}

// Lease runs the lease step of v's model on st at now, as
// Algorithm.Lease says. It assumes CheckLease passed.
func (v *ValidSpec) Lease(st *State, now int64, req LeaseRequest) (Lease, Outcome) {
	if !v.Leases() {
		return Lease{}, Outcome{}
	}
	return v.alg.Lease(v.spec.Params, st, now, req)
}
