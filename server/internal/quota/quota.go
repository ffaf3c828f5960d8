// Package quota divides one token bucket among holders that each enforce
// a token bucket of their own, as Envoys do under the rate limit quota
// service (RLQS): the model of the shares a holder is assigned, and of
// what stays central, such that everything all holders can admit keeps
// within the rule's own bound.
//
// # The bound
//
// A rule of rate R tokens per Unit and burst B admits, over any window of
// length d, at most B + R·d. Let S be the central level L plus the
// tokens in every holder's bucket. Each holder's hold (M, f) is the most
// its bucket holds and its refill per Unit; while a hold lasts, the
// central level is capped at B − ΣM and refills at R − Σf. So S ≤ B at
// all times, S refills at most at R, a new bucket (which starts full, as
// Envoy's does) moves its M from L to the holder and leaves S unchanged,
// and a bucket that expires only lowers S. Every admission takes 1 from
// S, hence at most S(a) + R·d ≤ B + R·d in any window [a, a+d].
//
// A hold lasts, on the central clock, from the step that assigns it
// until TTL + Slack after the last step that sent or refreshed it: the
// holder counts its TTL from receipt, which comes within Slack. A hold
// replaced by another keeps counting (componentwise, the larger of the
// two) until its own end, since a holder that never receives the new
// assignment keeps the old one until then.
//
// An identical assignment refreshes the holder's bucket without refilling
// it (Envoy carries a token bucket over when max_tokens and
// tokens_per_fill are unchanged), so a refresh moves no tokens; a refresh
// is only sent while the holder's bucket is certain to still be there
// (the step comes Slack before the earliest end of the last one's TTL).
// Otherwise the assignment is charged as a new bucket.
package quota

import "fmt"

// Rule is the token bucket shared: Rate tokens per Unit milliseconds,
// at most Burst at once.
type Rule struct {
	Rate, Unit, Burst int64
}

// MaxDemand is the most demand a holder counts with, in requests per
// Unit: every product the step computes stays below 2^53, where Lua's
// numbers are exact.
const MaxDemand = 1 << 23

// Check reports why r cannot be shared: each of Rate, Unit and Burst at
// least 1, and (Rate+1)·Burst·Unit below 2^53, the central level's
// largest value in tokens × Unit.
func (r Rule) Check() error {
	if r.Rate < 1 || r.Unit < 1 || r.Burst < 1 {
		return fmt.Errorf("quota: rate %d, unit %d ms and burst %d must each be at least 1", r.Rate, r.Unit, r.Burst)
	}
	if r.Rate > 1<<29 || r.Burst > 1<<53/((r.Rate+1)*r.Unit) {
		return fmt.Errorf("quota: rate %d per %d ms with burst %d is past what a quota bucket holds ((rate+1)·burst·unit below 2^53, rate at most 2^29)", r.Rate, r.Unit, r.Burst)
	}
	return nil
}

// Hold is what one holder may hold: a bucket of at most Tokens, refilled
// with Rate tokens per Unit.
type Hold struct {
	Tokens, Rate int64
}

// max returns the componentwise larger of h and o.
func (h Hold) max(o Hold) Hold {
	return Hold{Tokens: max(h.Tokens, o.Tokens), Rate: max(h.Rate, o.Rate)}
}

// Kind says what a step assigned.
type Kind int

const (
	// Deny: no bucket; the holder denies (a blanket DENY_ALL for TTL).
	Deny Kind = iota
	// New: a new bucket, which the holder starts full.
	New
	// Refresh: the holder's bucket, unchanged, its TTL restarted.
	Refresh
)

// Request is one holder's step: its demand, in requests per Unit (below
// 0 when it is not known yet, as at its first report), and the TTL of the
// assignment and the Slack, in milliseconds.
type Request struct {
	Holder     string
	Demand     int64
	TTL, Slack int64
}

// Step is one step of a bucket, at key, under its rule: the input of
// StepAll.
type Step struct {
	Key     string
	Rule    Rule
	Request Request
}

// Grant is a step's answer.
type Grant struct {
	Kind Kind
	Hold Hold
}

// holder is one holder's record: its current hold, sent at sent and
// counted until end, and the hold it replaced, counted until prevEnd.
type holder struct {
	cur       Hold
	sent, ttl int64
	end       int64
	prev      Hold
	prevEnd   int64
	demand    int64
	known     bool // demand was reported, not estimated
}

// at is the hold h counts at time t.
func (h *holder) at(t int64) Hold {
	var o Hold
	if h.end > t {
		o = h.cur
	}
	if h.prevEnd > t {
		o = o.max(h.prev)
	}
	return o
}

// State is one rule's central state: the level, in tokens × Unit, at
// time At, and the holders' records.
type State struct {
	Live    bool
	Level   int64
	At      int64
	holders map[string]*holder
	// short is until when a holder's share was held below its target
	// for want of free rate: until then, holders above theirs give it
	// back at once, with no hysteresis.
	short int64
}

// Reserve is the part of the rate never assigned, which refills the
// central level so that new buckets can be funded: 1/20 of it, rounded
// up, and less than all of it.
func Reserve(rate int64) int64 {
	return min((rate+19)/20, rate-1)
}

// StartShare is the most of the rate a holder's first assignment takes,
// before its demand is known: an eighth of what is assignable, so that
// Envoys that start together find room (and one alone takes the rest at
// its next step).
func StartShare(rate int64) int64 {
	return max(1, (rate-Reserve(rate))/8)
}

// Depth is the share of the burst a hold's bucket gets, relative to its
// share of the rate: a tenth, so that most of the burst stays central
// to fund new buckets.
const Depth = 10

// Step is req's step at time now (milliseconds).
func (s *State) Step(r Rule, req Request, now int64) Grant {
	if !s.Live {
		*s = State{Live: true, Level: r.Burst * r.Unit, At: now, holders: map[string]*holder{}}
	}
	if now > s.At {
		var rho int64
		for _, h := range s.holders {
			rho += h.at(s.At).Rate
		}
		// The rate held at At, the higher, all along: holds that end
		// before now refill nothing until the next step.
		s.Level += (r.Rate - rho) * min(now-s.At, r.Burst*r.Unit)
		s.At = now
	}
	var held Hold
	for id, h := range s.holders {
		if h.end <= now && h.prevEnd <= now && id != req.Holder {
			delete(s.holders, id)
			continue
		}
		hold := h.at(now)
		held.Tokens += hold.Tokens
		held.Rate += hold.Rate
	}
	s.Level = min(s.Level, (r.Burst-held.Tokens)*r.Unit)

	h := s.holders[req.Holder]
	if h == nil {
		h = &holder{}
		s.holders[req.Holder] = h
	}
	own := h.at(now)
	others := Hold{Tokens: held.Tokens - own.Tokens, Rate: held.Rate - own.Rate}
	h.demand, h.known = max(min(req.Demand, MaxDemand), 0), req.Demand >= 0
	// A holder whose demand is not known yet weighs the mean of the known.
	var known, unknown int64
	for _, o := range s.holders {
		if o.known {
			known += o.demand
		} else {
			unknown++
		}
	}
	n := int64(len(s.holders))
	weight, total := h.demand, known
	if unknown > 0 {
		if known == 0 {
			weight, total = 1, n
		} else {
			mean := known / (n - unknown)
			if !h.known {
				weight = mean
			}
			total = known + unknown*mean
		}
	}
	assignable := r.Rate - Reserve(r.Rate)
	target := assignable / n
	if total > 0 {
		target = assignable * weight / total
	}
	if req.Demand < 0 {
		target = min(target, StartShare(r.Rate))
	}

	refreshable := h.end > now && now+req.Slack < h.sent+h.ttl
	if refreshable && Near(target, h.cur.Rate) && (target >= h.cur.Rate || s.short <= now) {
		return s.refresh(h, req, now)
	}
	rate := min(target, assignable-others.Rate)
	if rate < target {
		s.short = now + req.TTL + req.Slack
		if refreshable && rate <= h.cur.Rate {
			// Growing, but not past what it holds: keep that.
			return s.refresh(h, req, now)
		}
	}
	tokens := min(max(1, ceilDiv(r.Burst*rate, Depth*r.Rate)), r.Burst-others.Tokens, s.Level/r.Unit)
	if rate < 1 || tokens < 1 {
		if refreshable {
			return s.refresh(h, req, now)
		}
		if h.end <= now && h.prevEnd <= now {
			h.end = 0 // a denied holder is kept for its demand until its TTL
			h.prevEnd = now + req.TTL + req.Slack
			h.prev = Hold{}
		}
		return Grant{Kind: Deny}
	}
	if h.end > now {
		h.prev, h.prevEnd = own, max(h.prevEnd, h.end)
	}
	h.cur = Hold{Tokens: tokens, Rate: rate}
	h.sent, h.ttl, h.end = now, req.TTL, now+req.TTL+req.Slack
	s.Level -= tokens * r.Unit
	return Grant{Kind: New, Hold: h.cur}
}

// refresh restarts h's TTL.
func (s *State) refresh(h *holder, req Request, now int64) Grant {
	h.sent, h.ttl, h.end = now, req.TTL, now+req.TTL+req.Slack
	return Grant{Kind: Refresh, Hold: h.cur}
}

// expires is when s, stepped at now, is as a new state would be: every
// hold ended and the level refilled to the burst (the PEXPIRE of
// quota.lua).
func (s *State) expires(r Rule, now int64) int64 {
	last := now
	for _, h := range s.holders {
		last = max(last, h.end, h.prevEnd)
	}
	return last + ceilDiv(r.Burst*r.Unit, r.Rate) + 1
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Near reports whether x is within an eighth of ref: close enough that
// a share, or the demand it was stepped for, is left as it is.
func Near(x, ref int64) bool {
	d := x - ref
	if d < 0 {
		d = -d
	}
	return 8*d <= ref
}
