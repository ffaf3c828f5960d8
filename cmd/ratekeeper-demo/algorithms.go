package main

import (
	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// fieldKind is how a field is written and checked.
type fieldKind string

const (
	kindWhole   fieldKind = "whole"   // a whole number from Min to Max
	kindDecimal fieldKind = "decimal" // a number above 0, at most Max
	kindSeconds fieldKind = "seconds" // seconds above 0, fractions allowed, at most Max
)

// field is one setting of an algorithm, as the page shows it and the
// server checks it.
type field struct {
	Name    string    `json:"name"`  // in JSON and forms
	Label   string    `json:"label"` // in the form and in messages
	Hint    string    `json:"hint"`  // beside the label: "tokens per interval"
	Unit    string    `json:"unit"`  // after the value in the current policy: "s"
	Kind    fieldKind `json:"kind"`
	Min     float64   `json:"min"` // for whole numbers; the others are above 0
	Max     float64   `json:"max"`
	Default float64   `json:"default"`

	policy string            // the ratekeeper.PolicyError field it becomes
	ref    func(*config) any // its *int64 or *float64 in a config
}

// algorithm is one algorithm the demo offers.
type algorithm struct {
	Name  string `json:"name"`
	Label string `json:"label"`
	Short string `json:"short"` // prefixes its inputs' ids on the page
	Level string `json:"level"` // what the gauge counts: "tokens left"
	Help  string `json:"help"`
	// Summary describes a policy in a sentence, with {name} for each
	// field's value.
	Summary string  `json:"summary"`
	Fields  []field `json:"fields"`
}

// maxSeconds is the longest duration a policy may use, in seconds.
var maxSeconds = ratekeeper.MaxPeriod.Seconds()

// The fields, each defined once for every algorithm that shares it. The
// defaults are all about ten requests at once and one a second after that,
// so that switching algorithms shows how they differ rather than how their
// numbers do.
func whole(name, label, hint string, max int64, policy string, def float64, ref func(*config) *int64) field {
	return field{Name: name, Label: label, Hint: hint, Kind: kindWhole, Min: 1, Max: float64(max), Default: def,
		policy: policy, ref: func(c *config) any { return ref(c) }}
}

func decimal(name, label, hint, unit string, kind fieldKind, max float64, policy string, def float64, ref func(*config) *float64) field {
	return field{Name: name, Label: label, Hint: hint, Unit: unit, Kind: kind, Max: max, Default: def,
		policy: policy, ref: func(c *config) any { return ref(c) }}
}

func limitField(max int64) field {
	return whole("limit", "Limit", "requests per window", max, "Limit", 10, func(c *config) *int64 { return &c.Limit })
}

var windowField = decimal("window", "Window", "seconds", "s", kindSeconds, maxSeconds, "Window", 10, func(c *config) *float64 { return &c.Window })

// algorithms is every algorithm the demo offers, in the page's order: the
// one table that the parser, the messages, the policies and the page read.
var algorithms = []algorithm{
	{
		Name: driver.AlgorithmTokenBucket, Label: "Token bucket", Short: "tb", Level: "tokens left",
		Help:    "A bucket that holds up to Capacity tokens and gains Refill rate tokens every Refill interval: bursts of up to Capacity, then the refill rate.",
		Summary: "Bursts of up to {capacity}, then {refill_rate} every {refill_interval} s.",
		Fields: []field{
			whole("capacity", "Capacity", "tokens", ratekeeper.MaxLimit, "Capacity", 10, func(c *config) *int64 { return &c.Capacity }),
			decimal("refill_rate", "Refill rate", "tokens per interval", "per interval", kindDecimal, ratekeeper.MaxLimit, "RefillRate", 1, func(c *config) *float64 { return &c.RefillRate }),
			decimal("refill_interval", "Refill interval", "seconds", "s", kindSeconds, maxSeconds, "RefillInterval", 1, func(c *config) *float64 { return &c.RefillInterval }),
		},
	},
	{
		Name: driver.AlgorithmGCRA, Label: "GCRA", Short: "gcra", Level: "requests left",
		Help:    "A bucket that refills continuously, one request every period / rate: no refill steps, one integer of state.",
		Summary: "{rate} per {period} s, bursts of up to {burst}.",
		Fields: []field{
			whole("rate", "Rate", "requests per period", ratekeeper.MaxLimit, "Rate", 1, func(c *config) *int64 { return &c.Rate }),
			decimal("period", "Period", "seconds", "s", kindSeconds, maxSeconds, "Period", 1, func(c *config) *float64 { return &c.Period }),
			whole("burst", "Burst", "requests at once", ratekeeper.MaxLimit, "Burst", 10, func(c *config) *int64 { return &c.Burst }),
		},
	},
	{
		Name: driver.AlgorithmFixedWindow, Label: "Fixed window", Short: "fw", Level: "left in this window",
		Help:    "Limit requests per window, counted from the first request. Up to twice the limit can pass across a window boundary.",
		Summary: "{limit} per {window} s window.",
		Fields:  []field{limitField(ratekeeper.MaxLimit), windowField},
	},
	{
		Name: driver.AlgorithmSlidingWindowLog, Label: "Sliding window log", Short: "swl", Level: "left in the window",
		Help:    "Exactly limit requests in any rolling window: remembers the time of every request.",
		Summary: "{limit} in any {window} s.",
		Fields:  []field{limitField(ratekeeper.MaxLogLimit), windowField},
	},
	{
		Name: driver.AlgorithmSlidingWindowCounter, Label: "Sliding window counter", Short: "swc", Level: "left (estimated)",
		Help:    "About limit requests in any rolling window, weighing the previous window\u2019s count: the memory of a fixed window, without its boundary bursts.",
		Summary: "About {limit} in any {window} s.",
		Fields:  []field{limitField(ratekeeper.MaxLimit), windowField},
	},
	{
		Name: driver.AlgorithmLeakyBucket, Label: "Leaky bucket", Short: "lb", Level: "free in the bucket",
		Help:    "Each request pours one into a bucket of capacity that drains leak rate per second; a request that would overflow it is rejected.",
		Summary: "Holds {capacity}, drains {leak_rate} per second.",
		Fields: []field{
			whole("capacity", "Capacity", "requests", ratekeeper.MaxLeakyCapacity, "Capacity", 10, func(c *config) *int64 { return &c.Capacity }),
			decimal("leak_rate", "Leak rate", "requests per second", "per second", kindDecimal, ratekeeper.MaxLimit, "LeakRate", 1, func(c *config) *float64 { return &c.LeakRate }),
		},
	},
}

// lookup returns the algorithm called name.
func lookup(name string) (*algorithm, bool) {
	for i := range algorithms {
		if algorithms[i].Name == name {
			return &algorithms[i], true
		}
	}
	return nil, false
}

// field returns a's field called name.
func (a *algorithm) field(name string) (*field, bool) {
	for i := range a.Fields {
		if a.Fields[i].Name == name {
			return &a.Fields[i], true
		}
	}
	return nil, false
}

// fieldNames lists a's fields, as named in JSON and forms.
func (a *algorithm) fieldNames() []string {
	names := make([]string, len(a.Fields))
	for i, f := range a.Fields {
		names[i] = f.Name
	}
	return names
}

// anyField returns a field called name of any algorithm, for its label.
func anyField(name string) (*field, bool) {
	for i := range algorithms {
		if f, ok := algorithms[i].field(name); ok {
			return f, true
		}
	}
	return nil, false
}
