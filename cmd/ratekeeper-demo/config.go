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

// defaults holds each algorithm's starting point: all of them about ten
// requests at once and one a second after that, so that switching
// between them shows how they differ rather than how their numbers do.
var defaults = map[string]config{
	ratekeeper.AlgorithmTokenBucket:          {Capacity: 10, RefillRate: 1, RefillInterval: 1},
	ratekeeper.AlgorithmGCRA:                 {Rate: 1, Period: 1, Burst: 10},
	ratekeeper.AlgorithmFixedWindow:          {Limit: 10, Window: 10},
	ratekeeper.AlgorithmSlidingWindowLog:     {Limit: 10, Window: 10},
	ratekeeper.AlgorithmSlidingWindowCounter: {Limit: 10, Window: 10},
	ratekeeper.AlgorithmLeakyBucket:          {Capacity: 10, LeakRate: 1},
}

// params lists each algorithm's fields, as named in JSON and forms.
var params = map[string][]string{
	ratekeeper.AlgorithmTokenBucket:          {"capacity", "refill_rate", "refill_interval"},
	ratekeeper.AlgorithmGCRA:                 {"rate", "period", "burst"},
	ratekeeper.AlgorithmFixedWindow:          {"limit", "window"},
	ratekeeper.AlgorithmSlidingWindowLog:     {"limit", "window"},
	ratekeeper.AlgorithmSlidingWindowCounter: {"limit", "window"},
	ratekeeper.AlgorithmLeakyBucket:          {"capacity", "leak_rate"},
}

// policyFields maps a field to the name the library's validation errors
// give it, so that an error can be shown next to its input.
var policyFields = map[string]*regexp.Regexp{
	"capacity":        regexp.MustCompile(`\bCapacity\b`),
	"refill_rate":     regexp.MustCompile(`\bRefillRate\b`),
	"refill_interval": regexp.MustCompile(`\bRefillInterval\b`),
	"rate":            regexp.MustCompile(`\bRate\b`),
	"period":          regexp.MustCompile(`\bPeriod\b`),
	"burst":           regexp.MustCompile(`\bBurst\b`),
	"limit":           regexp.MustCompile(`\bLimit\b`),
	"window":          regexp.MustCompile(`\bWindow\b`),
	"leak_rate":       regexp.MustCompile(`\bLeakRate\b`),
}

func defaultConfig() config { return withAlgorithm(ratekeeper.AlgorithmTokenBucket) }

func withAlgorithm(algorithm string) config {
	c := defaults[algorithm]
	c.Algorithm = algorithm
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

// labels names each field as the page does.
var labels = map[string]string{
	"capacity": "Capacity", "refill_rate": "Refill rate", "refill_interval": "Refill interval",
	"rate": "Rate", "period": "Period", "burst": "Burst",
	"limit": "Limit", "window": "Window", "leak_rate": "Leak rate",
	"algorithm": "Algorithm",
}

func label(field string) string {
	if l, ok := labels[field]; ok {
		return l
	}
	return field
}

// maxSeconds is the longest duration a policy may use, in seconds.
var maxSeconds = ratekeeper.MaxPeriod.Seconds()

// intRange is the range of a whole-number field of algorithm.
func intRange(algorithm, field string) (lo, hi int64) {
	switch {
	case algorithm == ratekeeper.AlgorithmLeakyBucket && field == "capacity":
		return 1, ratekeeper.MaxLeakyCapacity
	case algorithm == ratekeeper.AlgorithmSlidingWindowLog && field == "limit":
		return 1, ratekeeper.MaxLogLimit
	}
	return 1, ratekeeper.MaxLimit
}

// wholeNumberError is the one message for a whole-number field out of
// range or not a whole number at all.
func wholeNumberError(algorithm, field string) error {
	lo, hi := intRange(algorithm, field)
	return invalid(field, "%s must be a whole number from %s to %s.", label(field), grouped(lo), grouped(hi))
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
	names, ok := params[alg]
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
		if !slices.Contains(names, k) {
			if _, known := labels[k]; known {
				return config{}, invalid(k, "%s is not a setting of %s, whose settings are %s.", k, alg, strings.Join(names, ", "))
			}
			return config{}, invalid(k, "There is no setting %q.", k)
		}
		if err := c.set(k, strings.TrimSpace(fields[k])); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

func algorithmNames() []string {
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (c *config) set(field, raw string) error {
	switch field {
	case "capacity":
		return c.parseInt(field, raw, &c.Capacity)
	case "refill_rate":
		return parseFloat(field, raw, &c.RefillRate)
	case "refill_interval":
		return parseSeconds(field, raw, &c.RefillInterval)
	case "rate":
		return c.parseInt(field, raw, &c.Rate)
	case "period":
		return parseSeconds(field, raw, &c.Period)
	case "burst":
		return c.parseInt(field, raw, &c.Burst)
	case "limit":
		return c.parseInt(field, raw, &c.Limit)
	case "window":
		return parseSeconds(field, raw, &c.Window)
	case "leak_rate":
		return parseFloat(field, raw, &c.LeakRate)
	}
	return invalid(field, "There is no setting %q.", field)
}

func parseFloat(field, raw string, dst *float64) error {
	x, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
		return invalid(field, "%s must be a number above 0, such as 0.5.", label(field))
	}
	if x > ratekeeper.MaxLimit {
		return invalid(field, "%s must be at most %s.", label(field), grouped(ratekeeper.MaxLimit))
	}
	*dst = x
	return nil
}

// parseSeconds reads a duration in seconds, fractions allowed.
func parseSeconds(field, raw string, dst *float64) error {
	x, err := strconv.ParseFloat(raw, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
		return invalid(field, "%s must be a number of seconds above 0, such as 1.5.", label(field))
	}
	if x > maxSeconds {
		return invalid(field, "%s must be at most %s seconds (10 years).", label(field), grouped(int64(maxSeconds)))
	}
	*dst = x
	return nil
}

// parseInt accepts whole numbers in the field's range, also written as
// 5.0 or 1e3.
func (c *config) parseInt(field, raw string, dst *int64) error {
	lo, hi := intRange(c.Algorithm, field)
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		x, ferr := strconv.ParseFloat(raw, 64)
		if ferr != nil || x != math.Trunc(x) || x < float64(lo) || x > float64(hi) {
			return wholeNumberError(c.Algorithm, field)
		}
		n = int64(x)
	}
	if n < lo || n > hi {
		return wholeNumberError(c.Algorithm, field)
	}
	*dst = n
	return nil
}

// policy returns the configuration as a ratekeeper Policy. The library
// validates it: ratekeeper.New reports what is out of range.
func (c config) policy() (ratekeeper.Policy, error) {
	switch c.Algorithm {
	case ratekeeper.AlgorithmTokenBucket:
		interval, err := seconds("refill_interval", c.RefillInterval)
		if err != nil {
			return nil, err
		}
		return ratekeeper.TokenBucket{Capacity: c.Capacity, RefillRate: c.RefillRate, RefillInterval: interval}, nil
	case ratekeeper.AlgorithmGCRA:
		period, err := seconds("period", c.Period)
		if err != nil {
			return nil, err
		}
		return ratekeeper.GCRA{Rate: c.Rate, Period: period, Burst: c.Burst}, nil
	case ratekeeper.AlgorithmFixedWindow, ratekeeper.AlgorithmSlidingWindowLog, ratekeeper.AlgorithmSlidingWindowCounter:
		window, err := seconds("window", c.Window)
		if err != nil {
			return nil, err
		}
		switch c.Algorithm {
		case ratekeeper.AlgorithmFixedWindow:
			return ratekeeper.FixedWindow{Limit: c.Limit, Window: window}, nil
		case ratekeeper.AlgorithmSlidingWindowLog:
			return ratekeeper.SlidingWindowLog{Limit: c.Limit, Window: window}, nil
		}
		return ratekeeper.SlidingWindowCounter{Limit: c.Limit, Window: window}, nil
	case ratekeeper.AlgorithmLeakyBucket:
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
	{regexp.MustCompile(`GCRA burst of .* spans more than`), "burst", "%s is too large for this rate: a burst must refill within 10 years."},
	{regexp.MustCompile(`token bucket takes .* to fill`), "refill_rate", "The bucket would take more than 10 years to fill: raise the refill rate or shorten the refill interval."},
	{regexp.MustCompile(`LeakyBucket of Capacity .* takes more than .* to drain`), "leak_rate", "The bucket would take more than 10 years to drain: raise the leak rate."},
	{regexp.MustCompile(`must be between 1 and`), "", ""}, // the field's range
}

// policyError maps an error of ratekeeper.New for c to the field at fault
// and a message in the page's words. The library's messages are for
// programmers; anything not matched here is passed on, capitalised.
func policyError(c config, err error) *configError {
	text := err.Error()
	field := ""
	for _, name := range params[c.Algorithm] {
		if policyFields[name].MatchString(text) {
			field = name
			break
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
			return wholeNumberError(c.Algorithm, field).(*configError)
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
