package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// envoyproxy/ratelimit reads its files with gopkg.in/yaml.v2, whose YAML
// 1.1 reading of plain scalars differs from yaml.v3's: yes, on and y are
// booleans, 010 is octal, 08 is a float. The walker reads yaml.v3's nodes,
// for their lines, and types each scalar as yaml.v2 would, so that a file
// means here what it means to envoy.

// kind is the type yaml.v2 gives a scalar.
type kind int

const (
	kindStr kind = iota
	kindNull
	kindBool
	kindInt    // fits an int64
	kindBigInt // an integer above MaxInt64, which envoy's loader rejects
	kindFloat  // which envoy's loader rejects anywhere in a file
)

// scalar is a scalar node typed as yaml.v2 types it.
type scalar struct {
	kind kind
	b    bool
	i    int64
}

var (
	v2Null  = []string{"", "~", "null", "Null", "NULL"}
	v2True  = []string{"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
	v2False = []string{"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
	v2Float = []string{".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"}
	// yamlStyleFloat is yaml.v2's.
	yamlStyleFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
)

// resolve types a scalar node as yaml.v2 does (its resolve function).
func resolve(n *yaml.Node) scalar {
	if n.Style&yaml.TaggedStyle != 0 {
		switch n.ShortTag() {
		case "!!null":
			return scalar{kind: kindNull}
		case "!!bool", "!!int", "!!float":
			// resolved below, as a plain scalar
		default:
			return scalar{kind: kindStr}
		}
	} else if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return scalar{kind: kindStr}
	}
	s := n.Value
	switch {
	case slices.Contains(v2Null, s):
		return scalar{kind: kindNull}
	case slices.Contains(v2True, s):
		return scalar{kind: kindBool, b: true}
	case slices.Contains(v2False, s):
		return scalar{kind: kindBool}
	case slices.Contains(v2Float, s):
		return scalar{kind: kindFloat}
	}
	switch c := s[0]; {
	case c == '.':
		if _, err := strconv.ParseFloat(s, 64); err == nil {
			return scalar{kind: kindFloat}
		}
	case c == '+' || c == '-' || c >= '0' && c <= '9':
		plain := strings.ReplaceAll(s, "_", "")
		if i, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return scalar{kind: kindInt, i: i}
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return scalar{kind: kindBigInt}
		}
		if yamlStyleFloat.MatchString(plain) {
			if _, err := strconv.ParseFloat(plain, 64); err == nil {
				return scalar{kind: kindFloat}
			}
		}
	}
	return scalar{kind: kindStr}
}

// describe names a node's type for an error message.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		switch resolve(n).kind {
		case kindNull:
			return "null"
		case kindBool:
			return "a boolean (" + n.Value + ")"
		case kindInt, kindBigInt:
			return "a number (" + n.Value + ")"
		case kindFloat:
			return "a floating-point number (" + n.Value + ")"
		}
		return fmt.Sprintf("a string (%q)", n.Value)
	}
	return "a " + kindName(n)
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "scalar"
}
