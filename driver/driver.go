// Package driver is the whole contract of a ratekeeper Store, in the
// spirit of database/sql/driver: the Store interface and the optional
// ones a store may implement (MultiDecider, Charger), the validated,
// integer form of a policy (a ValidSpec), the state of a key, the models
// that decide, the Decision a store returns, and the checks of its input.
// A store is written from this package alone, and checked with
// driver/drivertest; ratekeeper makes its Results of the Decisions.
//
// Users of ratekeeper never need this package. A Limiter validates its
// policy once, in ratekeeper.New, into a ValidSpec that cannot change
// afterwards, and hands it to its Store with every call: a Store trusts
// it, and never validates it again.
//
// Each algorithm is defined by the package that declares its policy (the
// root package, for the six built in), which registers it here by name
// with Register. A Store runs an algorithm by that name: memstore with
// ValidSpec.Step, redisstore with the Lua script of the same name.
//
// Adding an algorithm takes two files: a Go file in the root package (the
// policy, its checks and its model, registered in an init function), and
// a Lua file of the same name in redisstore/lua (functions of the same
// name in the tables algorithms, charges and refunds). Then go test -run Golden -update in
// redisstore writes the scripts Redis will receive to
// redisstore/testdata, and the conformance suite (driver/drivertest)
// takes a case for the new policy.
//
// # Expiry
//
// A fresh or expired key has the zero State. A store may forget a key
// (reset it to the zero State) once the ResetAfter of the last Outcome
// that changed it has passed: no decision made at that time or later
// tells the two apart. A store whose keys expire on its own backend's
// clock (Redis's PX, a database's TTL) sets each key's expiry to the
// decision's ResetAfter from the time it decided at, plus a margin for
// the distance between its clock and the callers' (redisstore adds a
// millisecond when it reads the server's clock, for the rounding to
// milliseconds, and a second when callers supply the time). A decision
// that consumes nothing changes a state only to drop a sliding window
// log's entries that have left, as the script does, and a store need not
// write it back.
//
// # State
//
// A State holds a key's state in integers, V, and the model's other data
// in More. What they hold, per algorithm (Params as each policy's Spec
// method says), all times in microseconds since the Unix epoch:
//
//   - token_bucket: V[0] the tokens in millionths, below zero by a debt;
//     V[1] the time of the last refill step.
//   - gcra: V[0] the theoretical arrival time, at or before now for a key
//     as good as fresh, beyond now + Burst·interval in debt.
//   - leaky_bucket: V[0] the time the bucket is empty, rounded up; V[1]
//     the ticks it was rounded up by, below Params.Rate.
//   - fixed_window: V[0] the count, above Limit by a debt; V[1] the
//     window's start, or a calendar window's end (Params.Rate
//     AlignCalendar).
//   - sliding_window_counter: V[0] the start of the current window, a
//     multiple of Window; V[1] the previous window's count; V[2] the
//     current window's.
//   - sliding_window_log: V unused; More the log of admitted requests
//     (time and cost), oldest first, each counted until its time plus
//     Window.
//
// The algorithms that take leases (see Leaser) keep the leases a key
// holds in More: units held until an expiry, counted as taken until
// then, which the refill never fills. redisstore writes a state as its
// integers joined by ':' ("<tokens>:<last>"), followed by one
// "|<expires>:<units>" per lease, in order of expiry.
package driver

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Unit is the fixed-point scale of token amounts: specs count tokens in
// millionths, so fractional refills add up exactly (ten refills of 0.1
// token make exactly one token) in Go and in Lua, whose numbers are
// doubles and exact only below 2^53. An Outcome's Remaining is in Units.
const Unit = 1_000_000

// Bounds that keep every intermediate value of every model exact in a
// double (below 2^53), whatever the sequence of requests.
const (
	// MaxLimit is the largest Limit a Spec may have.
	MaxLimit = 1_000_000_000
	// MaxPeriod is the longest Window a Spec may have.
	MaxPeriod = 10 * 365 * 24 * time.Hour
	// MaxParts is the largest number of policies an All combines.
	MaxParts = 8
	// MaxNameLen is the longest policy name, in bytes.
	MaxNameLen = 64
)

// A Bound is a kind of bound a policy's field must keep, as the root
// package's PolicyError reports it.
type Bound int

const (
	// NoBound is the Bound of an error that is not about a bound.
	NoBound Bound = iota
	// BoundMin is broken by a field below its least value, Limit; a Limit
	// of 0 means that the field must be above 0.
	BoundMin
	// BoundMax is broken by a field above its largest value, Limit.
	BoundMax
	// BoundResolution is broken by a field finer than it is counted in:
	// a time that is not a whole number of microseconds, an amount that
	// rounds to less than a millionth. Limit is the resolution.
	BoundResolution
	// BoundRate is broken by a GCRA of more than one request per
	// microsecond of its Period; Limit is the largest Rate of that Period.
	BoundRate
	// BoundPeriod is broken by a policy that takes longer than MaxPeriod
	// (Limit) to recover from empty: a token bucket's refill, a leaky
	// bucket's drain, a GCRA's burst. Field is the one to change: a rate
	// too slow, or a burst too large.
	BoundPeriod
)

// String names the bound, as in "BoundMax".
func (b Bound) String() string {
	switch b {
	case NoBound:
		return "NoBound"
	case BoundMin:
		return "BoundMin"
	case BoundMax:
		return "BoundMax"
	case BoundResolution:
		return "BoundResolution"
	case BoundRate:
		return "BoundRate"
	case BoundPeriod:
		return "BoundPeriod"
	}
	return fmt.Sprintf("Bound(%d)", int(b))
}

// maxPeriodMicros is MaxPeriod in microseconds.
const maxPeriodMicros = int64(MaxPeriod / time.Microsecond)

// Algorithm names, as registered by the root package and as they appear
// in Spec.Algorithm.
const (
	AlgorithmTokenBucket          = "token_bucket"
	AlgorithmGCRA                 = "gcra"
	AlgorithmFixedWindow          = "fixed_window"
	AlgorithmSlidingWindowLog     = "sliding_window_log"
	AlgorithmSlidingWindowCounter = "sliding_window_counter"
	AlgorithmLeakyBucket          = "leaky_bucket"
	// AlgorithmAll combines the policies of its Parts; the driver itself
	// defines it.
	AlgorithmAll = "all"
)

// Params are an algorithm's parameters in the integer units it runs on.
// Each algorithm reads the fields it needs, as its documentation says,
// and needs the others zero. redisstore passes them to the scripts in
// this order.
type Params struct {
	// Capacity is the most a key's state holds: a token bucket's tokens
	// in millionths, a GCRA's burst, a window's limit in requests, a
	// leaky bucket's level.
	Capacity int64
	// Rate is what time adds back: a token bucket's millionths per
	// refill, a leaky bucket's drain per microsecond. A fixed window,
	// which nothing refills, holds its alignment here: 1 for windows
	// aligned to the Unix epoch, 0 for windows opened by a key's first
	// request.
	Rate int64
	// Interval is a time in microseconds: a token bucket's refill
	// interval, a GCRA's emission interval, a window's length.
	Interval int64
	// Cost is what one request takes, for an algorithm that counts in
	// finer units: a leaky bucket's ticks of drain time per request.
	Cost int64
}

// Spec is a policy in the integer units its algorithm runs on: times in
// microseconds, token amounts in millionths (Unit). A ratekeeper.Policy
// returns one; Validate checks it and makes it the ValidSpec a Store is
// given.
type Spec struct {
	// Algorithm names a registered algorithm, such as
	// AlgorithmTokenBucket.
	Algorithm string
	// Name names the policy in Results, response headers and metrics.
	// ratekeeper.New sets it to the Algorithm when it is empty.
	Name string
	// Limit is the Result.Limit: capacity, or requests per window.
	Limit int64
	// Window is the time over which Limit is granted (for a token bucket,
	// the time to refill from empty), as in the RateLimit-Policy header.
	// Zero lets Validate fill it in from the Params.
	Window time.Duration
	// MaxCost is the largest cost a single request may have.
	MaxCost int64
	// Params are the algorithm's parameters.
	Params Params
	// Parts are the Specs of the policies that an All Spec combines, each
	// with a distinct Name; nil for every other algorithm. An All Spec has
	// no Limit, Window or Params of its own, and its MaxCost is the
	// smallest of its parts'.
	Parts []Spec
}

// An Algorithm is a rate-limiting algorithm: the checks of its Params and
// its model. Register makes it known by name.
type Algorithm struct {
	// Check checks the Params of a Spec of the algorithm, and its Limit
	// and MaxCost against them, and returns its Window: the time, in
	// microseconds, over which Limit is granted. The driver checks what
	// every Spec shares (name, Limit, MaxCost and Window in range).
	Check func(s *Spec) (window int64, err error)
	// Step is the model: it decides a request of cost n (0 peeks: it
	// answers for a cost of 1) at time now, in microseconds since the
	// Unix epoch, against st, as mode says (see Mode). With Take it
	// consumes n from st when the request is allowed; with Check it
	// consumes nothing, and an allowed request reports the state as it
	// is. With Charge it consumes n whether or not it fits, up to a debt
	// it bounds (reporting Capped beyond it), and Allowed reports whether
	// n fitted; with Refund it gives up to n back, never beyond full, and
	// reports the state as a Check of cost 1 would. It may assume a Spec
	// that passed Check, 1 <= max(n, 1) <= Limit with Check and Take,
	// 1 <= n <= MaxLimit with Charge and Refund, and n > 0 but with
	// Check.
	//
	// A clock that goes back never makes a state's time go back: each
	// model decides at now or, while now is behind it, at the latest time
	// its state holds (a token bucket's last refill, a window's start, a
	// log's newest entry, a leaky bucket's last level), so that a request
	// admitted at a clock gone back is never counted as older than one
	// before it, and nothing refills until the clock catches up. GCRA
	// needs no such care: a clock gone back only puts its theoretical
	// arrival time further ahead. RetryAfter and ResetAfter count from
	// now, on the clock that must reach them.
	Step func(p Params, st *State, now, n int64, mode Mode) Outcome
	// Lease, if set, is the model's lease step (see Leaser): at now, it
	// gives back req.Back's unused units, if the state still counts it,
	// then takes up to req.Want units, at least req.Min, if they fit, and
	// counts what the new lease holds in st until it is given back or
	// expires, so that nothing refills it meanwhile. It returns the lease
	// taken and the Outcome of a take of req.Min (or of a peek, when
	// req.Want is 0). Step then decides every request with the leases of
	// st counted. It may assume CheckLease passed. An algorithm without it
	// takes no leases.
	Lease func(p Params, st *State, now int64, req LeaseRequest) (Lease, Outcome)
	// Short is a short form of the name, for stores' keys: "tb".
	Short string
	// Variant, if set, names the variant of the algorithm that a Spec's
	// Params select, when two variants must not share a key's state (a
	// fixed window aligned to the epoch, and one that opens at a key's
	// first request, count different windows): "" for the algorithm's
	// plain form, else a suffix of Short, such as "a". It is part of the
	// spec's StateID, after Short: "fwa".
	Variant func(p Params) string
}

var (
	registryMu sync.RWMutex
	registry   = map[string]*Algorithm{}
)

// Register makes an algorithm known by name. It panics if the name is
// taken or the algorithm lacks Check or Step: a program error, made at
// init time.
func Register(name string, a Algorithm) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if a.Check == nil || a.Step == nil || a.Short == "" || name == "" || name == AlgorithmAll {
		panic("ratekeeper: driver.Register of an incomplete algorithm " + name)
	}
	if _, dup := registry[name]; dup {
		panic("ratekeeper: driver.Register called twice for " + name)
	}
	registry[name] = &a
}

// Algorithms returns the names of the registered algorithms, sorted.
func Algorithms() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func lookup(name string) *Algorithm {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return registry[name]
}

// ErrInvalidSpec is ratekeeper.ErrInvalidPolicy: every error of Validate
// matches it, as does CheckSpec's.
var ErrInvalidSpec = errors.New("ratekeeper: invalid policy")

// A SpecError is a reason Validate refused a Spec: the field at fault
// (a Spec field, such as "Limit", or "" for the Spec as a whole) and why.
type SpecError struct {
	// Algorithm is the Spec's algorithm.
	Algorithm string
	// Field is the Spec field at fault, such as "Window", or "".
	Field string
	// Reason says why, such as "is out of range".
	Reason string
}

func (e *SpecError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("ratekeeper: invalid %s spec: %s", e.Algorithm, e.Reason)
	}
	return fmt.Sprintf("ratekeeper: invalid %s spec: %s %s", e.Algorithm, e.Field, e.Reason)
}

// Unwrap makes a SpecError match ErrInvalidSpec.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

func specError(s *Spec, field, format string, args ...any) error {
	return &SpecError{Algorithm: s.Algorithm, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// CheckName reports why name would be awkward in a header, a metric label
// or a Redis key, or "" when it is not: names are 1 to MaxNameLen bytes of
// printable UTF-8.
func CheckName(name string) string {
	if name == "" {
		return "is empty"
	}
	if len(name) > MaxNameLen {
		return fmt.Sprintf("of %d bytes is longer than %d", len(name), MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return fmt.Sprintf("%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Sprintf("%q holds an unprintable character", name)
		}
	}
	return ""
}
