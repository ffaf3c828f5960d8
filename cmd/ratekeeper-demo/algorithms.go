package main

import (
	"errors"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/catalog"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// fieldKind is how a field is written and checked.
type fieldKind = catalog.ParamKind

const (
	kindWhole   = catalog.ParamWhole   // a whole number from Min to Max
	kindDecimal = catalog.ParamDecimal // a number above 0, at most Max
	kindSeconds = catalog.ParamSeconds // seconds above 0, fractions allowed, at most Max
)

// field is one setting of an algorithm, as the page shows it and the
// server checks it: a catalog.Param.
type field struct {
	Name    string    `json:"name"`  // in JSON and forms
	Label   string    `json:"label"` // in the form and in messages
	Hint    string    `json:"hint"`  // beside the label: "tokens per interval"
	Unit    string    `json:"unit"`  // after the value in the current policy: "s"
	Kind    fieldKind `json:"kind"`
	Min     float64   `json:"min"` // for whole numbers; the others are above 0
	Max     float64   `json:"max"`
	Default float64   `json:"default"`

	index int           // its place in a config's values
	param catalog.Param // what it is to the library
}

// algorithm is one algorithm the demo offers: a catalog.Algorithm.
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
	// Leases: its limiter may take leases (the page's toggle).
	Leases bool `json:"leases"`

	alg      catalog.Algorithm
	noLeases string // why not, when it takes none
}

// algorithms is every algorithm the demo offers, in the page's order:
// ratekeeper's, the one table that the parser, the messages, the policies
// and the page read.
var algorithms = offered(catalog.All())

// offered makes the demo's table of the library's algorithms.
func offered(algs []catalog.Algorithm) []algorithm {
	out := make([]algorithm, len(algs))
	for i, a := range algs {
		out[i] = algorithm{Name: a.Name, Label: a.Label, Short: a.Short, Level: a.Remaining, Help: a.Doc,
			Summary: a.Summary, alg: a}
		defaults := make([]float64, len(a.Params))
		for j, p := range a.Params {
			out[i].Fields = append(out[i].Fields, field{Name: p.Name, Label: p.Label, Hint: p.Doc, Unit: p.Unit,
				Kind: p.Kind, Min: p.Min, Max: p.Max, Default: p.Default, index: j, param: p})
			defaults[j] = p.Default
		}
		out[i].Leases, out[i].noLeases = takesLeases(a, defaults)
	}
	return out
}

// takesLeases reports whether a's policies take leases, and why not when
// they do not: New's refusal, tried on its defaults over a store that
// takes them.
func takesLeases(a catalog.Algorithm, defaults []float64) (bool, string) {
	p, err := a.Build(defaults)
	if err != nil {
		return false, err.Error()
	}
	store := memstore.New(memstore.WithSweepInterval(0))
	defer store.Close()
	lim, err := ratekeeper.New(store, p, ratekeeper.WithLeases(ratekeeper.Leases{TTL: leaseTTL}))
	if err != nil {
		var pe *ratekeeper.PolicyError
		if errors.As(err, &pe) {
			return false, pe.Reason
		}
		return false, err.Error()
	}
	lim.Close()
	return true, ""
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

// policyField returns a's field that is its policy's field called name,
// as a ratekeeper.PolicyError names it.
func (a *algorithm) policyField(name string) (*field, bool) {
	for i := range a.Fields {
		if a.Fields[i].param.Field == name {
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
