package driver

// State is one key's state under a spec, for stores that keep state in
// process. The zero State is a key never seen (or expired). Its fields
// belong to the algorithm's model.
type State struct {
	// Live is false for a key never seen (or expired).
	Live bool
	// V holds the algorithm's integers.
	V [3]int64
	// More is whatever else the model keeps, of its own type, such as a
	// sliding window log's entries. A More that a Step changes in place
	// has a method Clone() any, which returns a copy for Clone.
	More any
}

// Clone returns a copy of st that shares nothing a Step changes, for a
// store that decides on a copy and keeps it only if it chooses to.
func (st *State) Clone() State {
	c := *st
	if m, ok := st.More.(interface{ Clone() any }); ok {
		c.More = m.Clone()
	}
	return c
}

// Outcome is one policy's decision in its integer units: Remaining in
// millionths (Unit), RetryAfter and ResetAfter in microseconds. A struct
// of five words, it passes through calls in registers.
type Outcome struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Remaining is what is left after the decision, in millionths.
	Remaining int64
	// RetryAfter is 0 when allowed; else the time until the same request
	// could be allowed, in microseconds. After a Charge or a Refund, the
	// time until a request of cost 1 could be.
	RetryAfter int64
	// ResetAfter is the time until the state is full again, in
	// microseconds.
	ResetAfter int64
	// Capped reports a Charge that met the largest debt the policy holds:
	// it took its cost up to that bound, and no more.
	Capped bool
}

// The models run through two entry points, one per case: Step decides
// under one policy, on its state; Decide decides under any spec, an All
// included, on the states of its Policies(), and returns the Decision a
// Store reports. Both assume a Valid spec and 0 <= n <= MaxCost() (see
// CheckRequest); the Lua scripts of redisstore are tested to return
// identical Outcomes. When a key may be forgotten is the package's
// "Expiry" rule.

// Step runs the model of v, a spec other than an All, on st: it decides a
// request of cost n (0 peeks: it answers for a cost of 1) at time now, in
// microseconds since the Unix epoch, as mode says. n = 0 is a Check in
// every mode; Charge and Refund assume n <= MaxLimit. It returns the zero Outcome for an All, whose parts' states are
// apart (see Decide).
func (v *ValidSpec) Step(st *State, now, n int64, mode Mode) Outcome {
	if v.alg == nil {
		return Outcome{}
	}
	if n == 0 {
		mode = Check // a peek, in every mode
	}
	return v.alg.Step(v.spec.Params, st, now, n, mode)
}

// Decide decides a request of cost n under v at now, as mode says, on
// sts: sts[i] is the state of Policies()[i], which must hold
// max(NumParts(), 1) states. An All takes all or nothing: with Take, it
// first decides every part without consuming, and only if all allow
// takes n from each; with another mode each part decides in that mode.
func (v *ValidSpec) Decide(sts []*State, now, n int64, mode Mode) Decision {
	if !v.IsAll() {
		return Decision{Outcome: v.Step(sts[0], now, n, mode)}
	}
	if n == 0 && mode == Take {
		mode = Check
	}
	var out [MaxParts]Outcome
	parts := v.parts
	if mode == Take {
		allowed := true
		for i := range parts {
			out[i] = parts[i].Step(sts[i], now, n, Check)
			allowed = allowed && out[i].Allowed
		}
		if !allowed {
			return v.Decision(out[:len(parts)])
		}
	}
	for i := range parts {
		out[i] = parts[i].Step(sts[i], now, n, mode)
	}
	return v.Decision(out[:len(parts)])
}
