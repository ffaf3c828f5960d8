// Package config reads the rate limit service's configuration: the YAML of
// envoyproxy/ratelimit, unchanged, plus optional extensions that choose
// ratekeeper's algorithms.
//
// A file holds one domain and a tree of descriptors:
//
//	domain: api
//	descriptors:
//	  - key: user                  # any value: one counter per value
//	    rate_limit: {unit: minute, requests_per_unit: 60}
//	  - key: path
//	    value: /login              # only this value; a value ending in * is a prefix
//	    rate_limit: {unit: hour, requests_per_unit: 10, name: login}
//
// Load reads a file, or every *.yaml and *.yml file of a directory, and
// reports every problem it finds, each with its file, line and field. A rule
// of envoy's form decides as envoy does: a fixed window aligned to its unit
// (ratekeeper.FixedWindow with Aligned set). The extensions, all optional,
// go in a rate_limit:
//
//   - algorithm: the name of one of catalog.All(), whose policy is
//     its PerPeriod of requests_per_unit per unit (or per period): such as
//     token_bucket (refills requests_per_unit tokens at every whole unit),
//     gcra (spreads them evenly over the unit), leaky_bucket (drains them
//     over the unit), or fixed_window (a window that starts at a key's
//     first request, where envoy's is aligned to the clock);
//   - burst: the capacity of the algorithms that take one (those that
//     Bursts, such as token_bucket; requests_per_unit when absent); the
//     window algorithms have none;
//   - period: a window of any length, such as 30s or 1h30m, instead of unit;
//   - count_over_limit: true charges the rule's hits even when its request
//     is denied (see Rule.CountOverLimit);
//   - refunds: true lets the rule's descriptors give hits back (see
//     Rule.Refunds);
//   - lease: {ttl: 50ms} decides the rule's descriptor from leases (see
//     Rule.Lease).
//
// and a descriptor may hold several limits, decided all or nothing, in a
// list rate_limits instead of its rate_limit:
//
//	descriptors:
//	  - key: user
//	    rate_limits:
//	      - {name: per_second, unit: second, requests_per_unit: 10}
//	      - {name: per_day, unit: day, requests_per_unit: 10000}
//
// The limits of rate_limits are named with name, or by their unit or
// period; a rule of several limits has no rate_limit.name, so it is named
// by its path and cannot be replaced.
//
// What envoy's loader accepts, Load accepts with the same meaning (yaml.v2's
// reading of YAML 1.1 included), with one exception: a requests_per_unit
// above ratekeeper.MaxLimit is an error. What envoy accepts but ignores,
// such as a unit written on a descriptor, is reported by Warnings.
//
// Lookup finds the rule of a request's descriptor exactly as
// envoyproxy/ratelimit does, and Watch reloads the configuration when its
// files change, Kubernetes ConfigMap volumes included.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// Entry is one key/value pair of a request's descriptor.
type Entry struct{ Key, Value string }

// Config is a validated, immutable set of domains (safe for concurrent use).
type Config struct {
	domains  map[string]*node
	names    []string
	files    []string
	warnings []error
}

// node is a level of a domain's descriptor tree, laid out as envoy's: the
// children by composite key ("key" or "key_value"), and the composite keys
// ending in "*" in the order of the file, which is the order they are tried.
type node struct {
	key, value string // as configured
	children   map[string]*node
	wildcards  []string
	rule       *Rule
	quota      []*QuotaBucket // a domain's quota_buckets
}

// Error is one problem in a configuration file: Error() is
// "file:line: field: message", field being the YAML path, such as
// descriptors[1].rate_limit.unit.
type Error struct {
	// File is the file's path, as Load was given it or found it in a
	// directory.
	File string
	// Line is the line, from 1; 0 when the problem is the file's as a
	// whole (it cannot be read, say).
	Line int
	// Field is the YAML path of the field at fault; "" for the file's
	// syntax.
	Field string
	// Msg says what is wrong.
	Msg string
}

// Error reads "file:line: field: message", leaving out the line and the
// field when they are unknown.
func (e *Error) Error() string {
	s := e.File
	if e.Line > 0 {
		s += fmt.Sprintf(":%d", e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Msg
}

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string { return slices.Clone(c.names) }

// HasDomain reports whether domain is configured. envoy answers OK, with
// no limit, to every descriptor of a domain it does not know, even one
// with a limit override.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Files returns the files the configuration was read from, in the order
// they were read.
func (c *Config) Files() []string { return slices.Clone(c.files) }

// Warnings returns what envoyproxy/ratelimit accepts but has no effect,
// such as a key it knows written where it is ignored (a unit directly on a
// descriptor), or a key given twice in one mapping (the last one counts).
// Each is an *Error. The service should log them.
func (c *Config) Warnings() []error { return slices.Clone(c.warnings) }

// Rule is what a configured descriptor decides. Lookup returns rules
// shared by every caller: treat them as read-only.
type Rule struct {
	// Domain is the rule's domain.
	Domain string
	// Name labels the rule in metrics and logs: rate_limit.name when given,
	// else the config path of the matched descriptor as written in the
	// config (e.g. "key_value.key2_value2", and "key_*" for wildcards), never
	// request values.
	Name string
	// ExplicitName is whether Name is a rate_limit.name: only such rules can
	// be replaced, since replaces refers to rate_limit names, as envoy's
	// does.
	ExplicitName bool
	// Unlimited rules always allow, and report no limit.
	Unlimited bool
	// Shadow rules (shadow_mode) decide and count, but always answer OK.
	Shadow bool
	// QuotaMode (quota_mode) answers OK when over the limit, as envoy's
	// does: the descriptor's status is OK, with its limit and what
	// remains, and it denies nothing. Envoy also lists the violation in
	// the response's dynamic metadata when RESPONSE_DYNAMIC_METADATA is
	// set; ratekeeper-server writes no dynamic metadata, and reports the
	// violation in /v1/decide's over_limit only.
	QuotaMode bool
	// CountOverLimit (count_over_limit) counts the rule's hits even when
	// its request is denied: its descriptor is charged, and may go into a
	// debt that time repays, where a denied request otherwise takes
	// nothing. For costs known after the response, such as an LLM's
	// tokens, which must count however large.
	CountOverLimit bool
	// Refunds (refunds) lets the rule's descriptors give hits back:
	// Envoy's is_negative_hits, /v1/decide's mode refund. Without it, and
	// without the service's own setting for every rule, a refund is not
	// made: whoever can reach the service must not be able to give a key
	// back.
	Refunds bool
	// Lease (lease: {ttl: 50ms}) has the service decide the rule's
	// descriptor's takes in process from leases of this TTL (see
	// ratekeeper.WithLeases); 0 for none. Only a rate_limit whose
	// algorithm takes leases has one.
	Lease time.Duration
	// DetailedMetric is the descriptor's detailed_metric. It asks envoy for
	// per-value statistics; ratekeeper's metrics never carry request
	// values, so it is informational.
	DetailedMetric bool
	// Replaces are the names of rules this one replaces: when a request
	// matches both, the replaced one is not applied.
	Replaces []string
	// Limits are the rule's limits, one or more (empty when Unlimited),
	// decided all or nothing.
	Limits []Limit
	// SharedValues, when not nil, has one element per entry of the matched
	// descriptor: for the entries matched by a wildcard with
	// share_threshold, the wildcard value (such as "files/*"), which stands
	// for the request's value in the counter's key, so that every value
	// matching it shares one counter; "" for the others.
	SharedValues []string
	// File is the file of the rule's descriptor.
	File string
	// Line is the line of the rule's descriptor in File.
	Line int

	policy ratekeeper.Policy
	keys   []string // the configured key of each level
}

// Limit is one limit of a rule.
type Limit struct {
	// Name is distinct within the rule: the name given in rate_limits, or
	// else the unit in lower case ("second") or the period as written
	// ("30s").
	Name string
	// RequestsPerUnit is the number of requests per Unit or Period; with a
	// bucket algorithm, its rate.
	RequestsPerUnit uint32
	// Unit is the Name of one of envoy's Units, such as "SECOND"; "" for
	// a period.
	Unit string
	// Period is the length of the window: the unit's (a MONTH is 30 days
	// and a YEAR 365, as envoy has them), or the period's.
	Period time.Duration
	// Algorithm is the name of one of catalog.All(), such as
	// "gcra"; "" means envoy's fixed window aligned to the unit.
	Algorithm string
	// Burst is the capacity of an algorithm that Bursts: the burst given,
	// or RequestsPerUnit. 0 for the others.
	Burst int64
	// Calendar, with calendar: true, is the calendar period of the unit
	// (DAY, WEEK, MONTH or YEAR): the windows are calendar periods in
	// Location (time_zone; nil is UTC), not envoy's fixed lengths. 0
	// otherwise.
	Calendar driver.Period
	// Location is the time zone of calendar periods.
	Location *time.Location
	// Policy is the ratekeeper policy that decides this limit: envoy's
	// plain rules become ratekeeper.FixedWindow{Limit: rpu, Window: unit,
	// Aligned: true}; nil when RequestsPerUnit is 0 (envoy then denies
	// every request).
	Policy ratekeeper.Policy
}

// Policy returns the policy of the whole rule: its one Limit's Policy, or
// ratekeeper.All of Named limits; nil when Unlimited or any limit blocks
// everything (RequestsPerUnit 0).
func (r *Rule) Policy() ratekeeper.Policy { return r.policy }

// BlocksAll reports whether one of the rule's limits has RequestsPerUnit
// 0, so that it denies every request of a cost above 0, as envoy does.
func (r *Rule) BlocksAll() bool {
	for _, l := range r.Limits {
		if l.RequestsPerUnit == 0 {
			return true
		}
	}
	return false
}

// Lookup returns the rule for a request's descriptor in domain, or nil (no
// rule: the service answers OK with no limit).
//
// It walks the domain's tree as envoyproxy/ratelimit does: at each level,
// the entry's key and value, else the first wildcard value (in the order of
// the file) that is a prefix of the value, else the key alone. The rule is
// the one of the level reached by the last entry; a descriptor with more or
// fewer entries than the configured path has none.
func (c *Config) Lookup(domain string, entries []Entry) *Rule {
	n := c.domains[domain]
	if n == nil {
		return nil
	}
	var rule *Rule
	var buf [128]byte
	for i, e := range entries {
		b := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
		next := n.children[string(b)]
		if next == nil {
			for _, w := range n.wildcards {
				if len(b) >= len(w)-1 && string(b[:len(w)-1]) == w[:len(w)-1] {
					next = n.children[w]
					break
				}
			}
		}
		if next == nil {
			next = n.children[e.Key]
		}
		if next == nil {
			return nil
		}
		if next.rule != nil && i == len(entries)-1 {
			rule = next.rule
		}
		if len(next.children) == 0 {
			break
		}
		n = next
	}
	return rule
}

// Errors lists the errors of err, one per problem: each error of an
// errors.Join, as Load and FromXDS return them, or err alone.
func Errors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Load reads a YAML file, or every *.yaml / *.yml file of a directory (not
// recursive; follows symlinks such as a Kubernetes ConfigMap's ..data;
// skips names starting with a dot), and validates them. The error lists
// EVERY problem found, each an *Error (errors.Join of them), so
// errors.As(err, &e) with e an *Error works.
func Load(path string) (*Config, error) {
	files, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return build(files)
}

// sortErrors orders errors by file, then line.
func sortErrors(errs []error) {
	slices.SortStableFunc(errs, func(a, b error) int {
		var ea, eb *Error
		if !errors.As(a, &ea) || !errors.As(b, &eb) {
			return 0
		}
		return cmp.Or(cmp.Compare(ea.File, eb.File), cmp.Compare(ea.Line, eb.Line))
	})
}
