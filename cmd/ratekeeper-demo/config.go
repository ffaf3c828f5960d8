package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
)

// config is the demo limiter's policy in the units of the original token
// bucket demo: durations in seconds (fractions allowed), amounts per
// interval or per second. Only the fields of the selected algorithm are
// set.
type config struct {
	Algorithm string `json:"algorithm"`
	// token_bucket and leaky_bucket: the most the bucket holds.
	Capacity int64 `json:"capacity,omitempty"`
	// token_bucket: tokens added every RefillInterval seconds.
	RefillRate     float64 `json:"refill_rate,omitempty"`
	RefillInterval float64 `json:"refill_interval,omitempty"`
	// gcra: Rate requests per Period seconds, Burst at once.
	Rate   int64   `json:"rate,omitempty"`
	Period float64 `json:"period,omitempty"`
	Burst  int64   `json:"burst,omitempty"`
	// fixed_window, sliding_window_log, sliding_window_counter: Limit
	// requests per Window seconds.
	Limit  int64   `json:"limit,omitempty"`
	Window float64 `json:"window,omitempty"`
	// leaky_bucket: requests drained per second.
	LeakRate float64 `json:"leak_rate,omitempty"`
}

func defaultConfig() config { return withAlgorithm(driver.AlgorithmTokenBucket) }

// withAlgorithm is the named algorithm with its defaults.
func withAlgorithm(name string) config {
	c := config{Algorithm: name}
	if a, ok := lookup(name); ok {
		for _, f := range a.Fields {
			switch p := f.ref(&c).(type) {
			case *int64:
				*p = int64(f.Default)
			case *float64:
				*p = f.Default
			}
		}
	}
	return c
}

// configError is an invalid configuration: what is wrong, in words for
// the page, and the field at fault when one is.
type configError struct {
	field string
	msg   string
}

func (e *configError) Error() string { return e.msg }

func invalid(field, format string, args ...any) error {
	return &configError{field: field, msg: fmt.Sprintf(format, args...)}
}

// label names a field as the page does.
func label(name string) string {
	if name == "algorithm" {
		return "Algorithm"
	}
	if f, ok := anyField(name); ok {
		return f.Label
	}
	return name
}

// wholeNumberError is the one message for a whole-number field out of
// range or not a whole number at all.
func wholeNumberError(f *field) error {
	return invalid(f.Name, "%s must be a whole number from %s to %s.", f.Label, grouped(int64(f.Min)), grouped(int64(f.Max)))
}

// grouped writes n with thousands separators: 1,000,000,000.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + grouped(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// decodeConfig reads a configuration change, JSON or form, into field
// values. Both encodings become the same map, so there is one parser. A
// change names at least one field, and each field once.
func decodeConfig(body []byte, mediaType string) (map[string]string, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, invalid("", "The request has no body: send the fields to change, such as capacity=5 or {\"capacity\":5}.")
	}
	isJSON := mediaType == "application/json" || strings.HasSuffix(mediaType, "+json") ||
		// curl -d '{...}' labels JSON as a form.
		bytes.HasPrefix(trimmed, []byte("{"))
	var fields map[string]string
	var err error
	if isJSON {
		fields, err = decodeJSON(trimmed)
	} else {
		fields, err = decodeForm(string(trimmed))
	}
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return nil, invalid("", "The request names no field: send the fields to change, such as capacity=5 or {\"capacity\":5}.")
	}
	return fields, nil
}

func decodeForm(body string) (map[string]string, error) {
	q, err := url.ParseQuery(body)
	if err != nil {
		return nil, invalid("", "The form is malformed: %s.", formProblem(err))
	}
	fields := make(map[string]string, len(q))
	for k, v := range q {
		if len(v) > 1 {
			return nil, invalid(k, "%s is given %d times: give it once.", label(k), len(v))
		}
		fields[k] = v[0]
	}
	return fields, nil
}

// formProblem says what url.ParseQuery found, without its Go wording.
func formProblem(err error) string {
	var esc url.EscapeError
	if errors.As(err, &esc) {
		return fmt.Sprintf("%q is not a valid escape", string(esc))
	}
	return "it is not URL-encoded"
}

// decodeJSON reads one JSON object whose values are numbers, or a string
// for the algorithm, token by token: so that a key given twice is an
// error rather than silently resolved, and no message names a Go type.
func decodeJSON(body []byte) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	notObject := invalid("", "The body must be a JSON object, such as {\"capacity\":5}.")
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err, dec)
	}
	if tok != json.Delim('{') {
		return nil, notObject
	}
	fields := make(map[string]string)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(err, dec)
		}
		k, _ := tok.(string) // the decoder allows only strings as keys
		if _, dup := fields[k]; dup {
			return nil, invalid(k, "%s is given twice: give it once.", label(k))
		}
		if tok, err = dec.Token(); err != nil {
			return nil, jsonError(err, dec)
		}
		switch v := tok.(type) {
		case json.Number:
			if k == "algorithm" {
				return nil, invalid(k, "Algorithm must be a name in quotes, such as \"gcra\".")
			}
			fields[k] = v.String()
		case string:
			if k != "algorithm" {
				return nil, invalid(k, "%s must be a number without quotes, such as 5.", label(k))
			}
			fields[k] = v
		default:
			if k == "algorithm" {
				return nil, invalid(k, "Algorithm must be a name in quotes, such as \"gcra\".")
			}
			return nil, invalid(k, "%s must be a number, not %s.", label(k), jsonKind(tok))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, jsonError(err, dec)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("", "The body holds more than one JSON object: send one.")
	}
	return fields, nil
}

// jsonKind names the JSON value that tok starts.
func jsonKind(tok json.Token) string {
	switch tok {
	case json.Delim('['):
		return "a list"
	case json.Delim('{'):
		return "an object"
	case nil:
		return "null"
	}
	return fmt.Sprint(tok) // true or false
}

// jsonError says where the JSON went wrong, in the decoder's words, which
// name no Go types.
func jsonError(err error, dec *json.Decoder) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalid("", "The JSON body ends too soon.")
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return invalid("", "The body is not valid JSON at byte %d: %s.", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	}
	return invalid("", "The body is not valid JSON at byte %d.", dec.InputOffset())
}

// parseConfig applies field values to cur. The algorithm defaults to the
// current one, so that a change of one field keeps it. Fields left out
// keep their current values, or the algorithm's defaults when it changes.
// Unknown fields, and those of other algorithms, are errors rather than
// silently ignored.
func parseConfig(fields map[string]string, cur config) (config, error) {
	alg, ok := fields["algorithm"]
	if !ok || alg == "" {
		alg = cur.Algorithm
	}
	a, ok := lookup(alg)
	if !ok {
		return config{}, invalid("algorithm", "There is no algorithm %q: choose one of %s.", alg, strings.Join(algorithmNames(), ", "))
	}
	c := cur
	if cur.Algorithm != alg {
		c = withAlgorithm(alg)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same error for the same request
	for _, k := range keys {
		if k == "algorithm" {
			continue
		}
		f, ok := a.field(k)
		if !ok {
			if _, known := anyField(k); known {
				return config{}, invalid(k, "%s is not a setting of %s, whose settings are %s.", k, alg, strings.Join(a.fieldNames(), ", "))
			}
			return config{}, invalid(k, "There is no setting %q.", k)
		}
		if err := c.set(f, strings.TrimSpace(fields[k])); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

func algorithmNames() []string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.Name
	}
	slices.Sort(names)
	return names
}

// set reads raw into c's field f, checked as f's kind and range.
func (c *config) set(f *field, raw string) error {
	x, err := strconv.ParseFloat(raw, 64)
	bad := err != nil || math.IsNaN(x) || math.IsInf(x, 0)
	switch p := f.ref(c).(type) {
	case *int64:
		// Whole numbers in range, also written as 5.0 or 1e3.
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			if bad || x != math.Trunc(x) || x < f.Min || x > f.Max {
				return wholeNumberError(f)
			}
			n = int64(x)
		}
		if float64(n) < f.Min || float64(n) > f.Max {
			return wholeNumberError(f)
		}
		*p = n
	case *float64:
		if bad || x <= 0 {
			if f.Kind == kindSeconds {
				return invalid(f.Name, "%s must be a number of seconds above 0, such as 1.5.", f.Label)
			}
			return invalid(f.Name, "%s must be a number above 0, such as 0.5.", f.Label)
		}
		if x > f.Max {
			return tooLarge(f)
		}
		*p = x
	}
	return nil
}

// tooLarge says that a decimal or seconds field is above its range.
func tooLarge(f *field) error {
	if f.Kind == kindSeconds {
		return invalid(f.Name, "%s must be at most %s seconds (10 years).", f.Label, grouped(int64(f.Max)))
	}
	return invalid(f.Name, "%s must be at most %s.", f.Label, grouped(int64(f.Max)))
}

// policy returns the configuration as a ratekeeper Policy. The library
// validates it: ratekeeper.New reports what is out of range.
func (c config) policy() (ratekeeper.Policy, error) {
	switch c.Algorithm {
	case driver.AlgorithmTokenBucket:
		interval, err := seconds("refill_interval", c.RefillInterval)
		if err != nil {
			return nil, err
		}
		return ratekeeper.TokenBucket{Capacity: c.Capacity, RefillRate: c.RefillRate, RefillInterval: interval}, nil
	case driver.AlgorithmGCRA:
		period, err := seconds("period", c.Period)
		if err != nil {
			return nil, err
		}
		return ratekeeper.GCRA{Rate: c.Rate, Period: period, Burst: c.Burst}, nil
	case driver.AlgorithmFixedWindow, driver.AlgorithmSlidingWindowLog, driver.AlgorithmSlidingWindowCounter:
		window, err := seconds("window", c.Window)
		if err != nil {
			return nil, err
		}
		switch c.Algorithm {
		case driver.AlgorithmFixedWindow:
			return ratekeeper.FixedWindow{Limit: c.Limit, Window: window}, nil
		case driver.AlgorithmSlidingWindowLog:
			return ratekeeper.SlidingWindowLog{Limit: c.Limit, Window: window}, nil
		}
		return ratekeeper.SlidingWindowCounter{Limit: c.Limit, Window: window}, nil
	case driver.AlgorithmLeakyBucket:
		return ratekeeper.LeakyBucket{Capacity: c.Capacity, LeakRate: c.LeakRate}, nil
	}
	return nil, invalid("algorithm", "unknown algorithm %q", c.Algorithm)
}

// seconds converts a number of seconds to a Duration, to the nanosecond.
// Values that are not positive pass through for the library to reject.
func seconds(field string, s float64) (time.Duration, error) {
	if s > maxSeconds {
		return 0, invalid(field, "%s must be at most %s seconds (10 years).", label(field), grouped(int64(maxSeconds)))
	}
	return time.Duration(math.Round(s * float64(time.Second))), nil
}

// newLimiter validates c and builds its limiter over store. Invalid
// configurations return a *configError that says what is wrong in the
// page's words.
func newLimiter(store ratekeeper.Store, c config) (*ratekeeper.Limiter, error) {
	p, err := c.policy()
	if err != nil {
		return nil, err
	}
	lim, err := ratekeeper.New(store, p)
	if err != nil {
		return nil, policyError(c, err)
	}
	return lim, nil
}

// policyRules turn the library's validation messages into the page's
// words. The demo checks each field's range before the library sees it, so
// these are the rules between fields, and the resolutions.
var policyRules = []struct {
	match *regexp.Regexp
	field string // "" for the field the message names
	msg   string // with %s for the field's label
}{
	{regexp.MustCompile(`not a whole number of microseconds`), "", "%s must be a whole number of microseconds: at most 6 decimal places."},
	{regexp.MustCompile(`below the resolution of 1e-6`), "", "%s must be at least 0.000001."},
	{regexp.MustCompile(`more than one request per microsecond`), "rate", "%s must be at most one request per microsecond of the period."},
	{regexp.MustCompile(`GCRA Burst of .* spans more than`), "burst", "%s is too large for this rate: a burst must refill within 10 years."},
	{regexp.MustCompile(`bucket takes .* to fill`), "refill_rate", "The bucket would take more than 10 years to fill: raise the refill rate or shorten the refill interval."},
	{regexp.MustCompile(`takes more than .* to drain`), "leak_rate", "The bucket would take more than 10 years to drain: raise the leak rate."},
	{regexp.MustCompile(`must be between 1 and`), "", ""}, // the field's range
}

// policyError maps an error of ratekeeper.New for c to the field at fault
// and a message in the page's words. The library's messages are for
// programmers; anything not matched here is passed on, capitalised.
func policyError(c config, err error) *configError {
	text := err.Error()
	field := ""
	var pe *ratekeeper.PolicyError
	a, _ := lookup(c.Algorithm)
	if errors.As(err, &pe) && a != nil {
		for _, f := range a.Fields {
			if f.policy == pe.Field {
				field = f.Name
				break
			}
		}
	}
	for _, r := range policyRules {
		if !r.match.MatchString(text) {
			continue
		}
		if r.field != "" {
			field = r.field
		}
		if r.msg == "" {
			if a != nil {
				if f, ok := a.field(field); ok {
					return wholeNumberError(f).(*configError)
				}
			}
			continue
		}
		if strings.Contains(r.msg, "%s") {
			return &configError{field: field, msg: fmt.Sprintf(r.msg, label(field))}
		}
		return &configError{field: field, msg: r.msg}
	}
	text = strings.TrimPrefix(strings.TrimPrefix(text, ratekeeper.ErrInvalidPolicy.Error()), ": ")
	if text != "" {
		text = strings.ToUpper(text[:1]) + text[1:] + "."
	}
	return &configError{field: field, msg: text}
}
