package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
)

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
		case bool:
			if k != "leases" {
				return nil, invalid(k, "%s must be a number, not %t.", label(k), v)
			}
			fields[k] = fmt.Sprint(v)
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
