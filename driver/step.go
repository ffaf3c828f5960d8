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

	parts []State // an All's, one per part
}

// Clone returns a copy of st that shares nothing a Step changes, for a
// store that decides on a copy and keeps it only if it chooses to.
func (st *State) Clone() State {
	c := *st
	if m, ok := st.More.(interface{ Clone() any }); ok {
		c.More = m.Clone()
	}
	if st.parts != nil {
		c.parts = make([]State, len(st.parts))
		for i := range st.parts {
			c.parts[i] = st.parts[i].Clone()
		}
	}
	return c
}

// Outcome is a decision in a spec's integer units: Remaining in
// millionths (Unit), RetryAfter and ResetAfter in microseconds. The models
// return it rather than a ratekeeper.Result: a struct of four words
// passes through calls in registers.
type Outcome struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Remaining is what is left after the decision, in millionths.
	Remaining int64
	// RetryAfter is 0 when allowed; else the time until the same request
	// could be allowed, in microseconds.
	RetryAfter int64
	// ResetAfter is the time until the state is full again, in
	// microseconds.
	ResetAfter int64
}

// Step is the spec's model: it decides a request of cost n at time now (in
// microseconds since the Unix epoch) against st, consumes from st when the
// request is allowed, and returns the Outcome of every part: out[0] for a
// spec other than an All, out[i] for an All's i-th part. n = 0 peeks.
// When nothing is consumed, it changes st only to drop a sliding window
// log's entries that have left, as the script does. A fresh or expired key
// has the zero State; the key may be forgotten (reset to the zero State)
// once the Outcome's ResetAfter has passed, without changing any later
// decision made at that time or after it. out must hold
// max(NumParts(), 1) Outcomes.
//
// Step assumes 0 <= n <= MaxCost(); the Lua scripts of redisstore are
// tested to return identical Outcomes.
func (v *ValidSpec) Step(st *State, now, n int64, out []Outcome) {
	if v.IsAll() {
		if len(st.parts) != len(v.parts) {
			st.parts = make([]State, len(v.parts))
		}
		var sts [MaxParts]*State
		for i := range st.parts {
			sts[i] = &st.parts[i]
		}
		v.StepAll(sts[:len(v.parts)], now, n, out)
		return
	}
	out[0] = v.StepOne(st, now, n)
}

// StepOne is Step for a spec other than an All. It returns the zero
// Outcome for an All, whose parts' states are apart (see StepAll).
func (v *ValidSpec) StepOne(st *State, now, n int64) Outcome {
	return v.Decide(st, now, n, Take)
}

// Decide is StepOne in a given mode: with Check, it decides a request of
// cost n (0 answers for 1) and consumes nothing, reporting the state as it
// is; with Take, it is StepOne. A Take of n = 0 is a Check. It returns the
// zero Outcome for an All.
func (v *ValidSpec) Decide(st *State, now, n int64, mode Mode) Outcome {
	if v.alg == nil {
		return Outcome{}
	}
	if n == 0 && mode == Take {
		mode = Check
	}
	return v.alg.Step(v.spec.Params, st, now, n, mode)
}

// StepAll is Step for an All spec whose parts' states are kept apart, as
// memstore keeps them: sts[i] is the state of Part(i), out[i] its Outcome.
// It first decides every part without consuming; only if all allow does
// it take n from each.
func (v *ValidSpec) StepAll(sts []*State, now, n int64, out []Outcome) {
	allowed := true
	for i := range v.parts {
		p := &v.parts[i]
		out[i] = p.alg.Step(p.spec.Params, sts[i], now, n, Check)
		allowed = allowed && out[i].Allowed
	}
	if allowed && n > 0 {
		for i := range v.parts {
			p := &v.parts[i]
			out[i] = p.alg.Step(p.spec.Params, sts[i], now, n, Take)
		}
	}
}

// Binding returns which of an All's parts' Outcomes, in the order of its
// parts, the All reports: the one that denies for longest when the
// request is denied (any part denies), else the one with the least
// Remaining. The All's Result is that part's, with the latest ResetAfter,
// also returned. When the request is denied, the parts that would have
// allowed it report their state as it is, since nothing was taken.
func Binding(parts []Outcome) (binding int, allowed bool, resetAfter int64) {
	allowed = true
	for _, p := range parts {
		allowed = allowed && p.Allowed
	}
	for i, p := range parts {
		resetAfter = max(resetAfter, p.ResetAfter)
		switch q := parts[binding]; {
		case allowed && p.Remaining < q.Remaining,
			!allowed && !p.Allowed && (q.Allowed || p.RetryAfter > q.RetryAfter):
			binding = i
		}
	}
	return binding, allowed, resetAfter
}
