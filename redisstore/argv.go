package redisstore

import (
	"slices"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

// request is what one script call decides, typed: each entry script's
// ARGV is built from it here, and only here (single.lua, all.lua, and
// batch.lua for several single.lua requests).
type request struct {
	// parts are the policies decided, each with its cost: one for
	// single.lua; for all.lua, every policy of an All, or of the requests
	// of a DecideAll, decided together.
	parts []part
	// one holds parts for a single policy, so that a lone decision
	// allocates no array of its own.
	one [1]part
	// now is the time to decide at, in microseconds, or serverClock.
	now int64
	// skew is the expiry slack of a supplied now, in milliseconds
	// (WithClockSkew); 0 is the default.
	skew int
	// mode is what the request does with its cost: the same for every
	// policy of an All or a DecideAll, unless modes says otherwise.
	mode driver.Mode
	// modes, when not nil, is all.lua's mode of each part, one digit
	// each (see modeDigit): those of a DecideAll's requests.
	modes []byte
	// lease, when not nil, is lease.lua's lease step.
	lease *driver.LeaseRequest
}

// part is one policy of a request and its cost n.
type part struct {
	spec *driver.ValidSpec // never an All
	n    int64
}

// serverClock is a request's now when the scripts read the server's clock
// (TIME). A supplied time is never negative (driver.CheckTime).
const serverClock = -1

// clockOf is the now of a request sent at sent by s: sent itself with a
// supplied clock (WithClock), else the server's.
func (s *Store) clockOf(sent time.Time) int64 {
	if s.now == nil {
		return serverClock
	}
	return sent.UnixMicro()
}

// appendParts adds each policy of spec (an All's parts, or spec alone)
// with cost n to r.
func (r *request) appendParts(spec *driver.ValidSpec, n int64) {
	for _, p := range spec.Policies() {
		r.parts = append(r.parts, part{spec: p, n: n})
	}
}

// clock is what the scripts take for r's time: its microseconds, or ""
// for the server's clock; and the expiry slack that goes with it.
func (r *request) clock() (now any, slack int) {
	if r.now == serverClock {
		return "", serverClockSlack
	}
	if r.skew > 0 {
		return r.now, r.skew
	}
	return r.now, suppliedClockSlack
}

// singleArgs is single.lua's ARGV: the cost, the time, the expiry slack,
// the policy's parameters, then the mode.
func (r *request) singleArgs() []any {
	now, slack := r.clock()
	p := r.parts[0]
	return append(appendParams(append(make([]any, 0, 8), p.n, now, slack), p.spec, r.now), int(r.mode))
}

// allArgs is all.lua's ARGV: the time, the expiry slack and the mode (or
// the modes), then each policy's algorithm, cost and parameters.
func (r *request) allArgs() []any {
	now, slack := r.clock()
	var mode any = int(r.mode)
	if r.modes != nil {
		mode = string(r.modes)
	}
	args := append(make([]any, 0, 3+6*len(r.parts)), now, slack, mode)
	for _, p := range r.parts {
		args = appendParams(append(args, p.spec.Algorithm(), p.n), p.spec, r.now)
	}
	return args
}

// args is c's ARGV, that of its entry script.
func (c *call) args() []any {
	switch {
	case c.alg == allScript:
		return c.req.allArgs()
	case c.req.lease != nil:
		return c.req.leaseArgs()
	}
	return c.req.singleArgs()
}

// leaseArgs is lease.lua's ARGV: the time, the expiry slack, the
// policy's parameters, the new lease (want, least, ttl), then the lease
// given back (its units, its expiry, and how many were not spent).
func (r *request) leaseArgs() []any {
	now, slack := r.clock()
	l := r.lease
	args := appendParams(append(make([]any, 0, 12), now, slack), r.parts[0].spec, r.now)
	return append(args, l.Want, l.Min, l.TTL, l.Back.Units, l.Back.Expires, l.Unused)
}

// batchArgs is batch.lua's ARGV for calls of single.lua, of one store and
// so of one expiry slack: the slack, the number of distinct parameter
// sets, each set, then each request's cost, time, set (from 1) and mode.
func batchArgs(calls []*call) []any {
	_, slack := calls[0].req.clock()
	sets := make([]params, 0, 1)
	set := make([]int, len(calls))
	for i, c := range calls {
		p := paramsOf(c.req.parts[0].spec, c.req.now)
		j := slices.Index(sets, p)
		if j < 0 {
			j, sets = len(sets), append(sets, p)
		}
		set[i] = j + 1
	}
	args := append(make([]any, 0, 2+4*len(sets)+4*len(calls)), slack, len(sets))
	for _, p := range sets {
		args = p.append(args)
	}
	for i, c := range calls {
		now, _ := c.req.clock()
		args = append(args, c.req.parts[0].n, now, set[i], int(c.req.mode))
	}
	return args
}

// params are a policy's parameters as the scripts take them, in order.
type params struct {
	capacity, rate, interval int64
	cost                     any // an int64, or a calendar window's ends
}

// paramsOf is the parameters of spec, one policy, for a request at now
// (or serverClock). A calendar window's cost is the ends of its periods
// around now, or the local clock (driver.CalendarEnds): the script
// decides in the one that contains the time it decides at.
func paramsOf(spec *driver.ValidSpec, now int64) params {
	p := spec.Params()
	if p.Rate == driver.AlignCalendar && spec.Algorithm() == driver.AlgorithmFixedWindow {
		if now == serverClock {
			now = time.Now().UnixMicro()
		}
		b, _ := driver.CalendarEnds(p.Cost, now)
		return params{p.Capacity, p.Rate, p.Interval, b.String()}
	}
	return params{p.Capacity, p.Rate, p.Interval, p.Cost}
}

// append appends p to args.
func (p params) append(args []any) []any {
	return append(args, p.capacity, p.rate, p.interval, p.cost)
}

// appendParams appends the parameters of spec, one policy, to args, in
// the order every script takes them, for a request at now (or
// serverClock).
func appendParams(args []any, spec *driver.ValidSpec, now int64) []any {
	return paramsOf(spec, now).append(args)
}
