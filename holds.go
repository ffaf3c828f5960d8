package ratekeeper

import "github.com/ratekeeper/ratekeeper/driver"

// A hold is what one lease holds of a key's state until it expires, in
// requests: the leased units a Limiter may still spend, counted as taken.
type hold struct {
	expires int64 // microseconds
	units   int64
}

// holds are a key's live leases, by expiry, held in State.More. A step
// never changes them in place: it makes new ones to keep.
type holds []hold

// holdsOf returns st's holds, or nil.
func holdsOf(st *state) holds {
	h, _ := st.More.(holds)
	return h
}

// units returns what the holds hold in all.
func (h holds) units() int64 {
	var sum int64
	for _, x := range h {
		sum += x.units
	}
	return sum
}

// expired splits h at now: the holds that expired by now, and those
// still live.
func (h holds) expired(now int64) (gone, live holds) {
	i := 0
	for i < len(h) && h[i].expires <= now {
		i++
	}
	return h[:i], h[i:]
}

// without returns h less units of the hold that expires at expires, and
// whether h had one: a lease given back.
func (h holds) without(expires, units int64) (holds, bool) {
	for i, x := range h {
		if x.expires == expires {
			out := append(holds(nil), h[:i]...)
			if x.units > units {
				out = append(out, hold{expires, x.units - units})
			}
			return append(out, h[i+1:]...), true
		}
	}
	return h, false
}

// with returns h with units more held until expires, in order of expiry:
// a new lease, merged with one that expires at the same microsecond.
func (h holds) with(expires, units int64) holds {
	out := make(holds, 0, len(h)+1)
	added := false
	for _, x := range h {
		switch {
		case added || x.expires < expires:
		case x.expires == expires:
			x.units += units
			added = true
		default:
			out = append(out, hold{expires, units})
			added = true
		}
		out = append(out, x)
	}
	if !added {
		out = append(out, hold{expires, units})
	}
	return out
}

// keep sets st's holds to h, or none.
func (h holds) keep(st *state) {
	st.More = nil
	if len(h) > 0 {
		st.More = h
	}
}

// full reports whether a key with holds h may take no new lease.
func (h holds) full() bool { return len(h) >= driver.MaxHolds }
