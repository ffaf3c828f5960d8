package httplimit_test

import (
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// mirrored names the Go blocks of docs/http.md that an Example holds word
// for word, so that they compile and run: each by a line that only it
// has.
var mirrored = map[string]string{
	"key, err := httplimit.NewClientIP(httplimit.ClientIPConfig{": "ExampleNewClientIP",
}

// TestDocSnippets: every Go block of docs/http.md is formatted as gofmt
// formats it, and the blocks in mirrored appear whole in their Examples.
func TestDocSnippets(t *testing.T) {
	doc, err := os.ReadFile("../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(doc))
	if len(blocks) == 0 {
		t.Fatal("docs/http.md has no Go blocks")
	}
	for _, b := range blocks {
		if got, err := gofmtSnippet(b); err != nil {
			t.Errorf("docs/http.md block:\n%s\ndoes not parse: %v", b, err)
		} else if got != b {
			t.Errorf("docs/http.md block:\n%s\nis not gofmt-formatted; gofmt writes:\n%s", b, got)
		}
	}
	bodies := exampleBodies(t, "example_test.go")
	for line, example := range mirrored {
		var found []string
		for _, b := range blocks {
			if strings.Contains(b, line+"\n") {
				found = append(found, b)
			}
		}
		if len(found) != 1 {
			t.Errorf("%d blocks of docs/http.md hold %q, want 1", len(found), line)
			continue
		}
		if body, ok := bodies[example]; !ok {
			t.Errorf("no %s in example_test.go", example)
		} else if !strings.Contains(body, found[0]) {
			t.Errorf("docs/http.md block:\n%s\nis not in %s:\n%s", found[0], example, body)
		}
	}
}

// goBlocks returns the contents of the ```go blocks of a Markdown text.
func goBlocks(doc string) []string {
	var blocks []string
	var b strings.Builder
	in := false
	for line := range strings.Lines(doc) {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in = true
			b.Reset()
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, b.String())
		case in:
			b.WriteString(line)
		}
	}
	return blocks
}

// gofmtSnippet formats a block of declarations, or else of statements, as
// gofmt would in a file or in a function's body.
func gofmtSnippet(src string) (string, error) {
	if out, err := format.Source([]byte("package p\n\n" + src)); err == nil {
		return strings.TrimPrefix(string(out), "package p\n\n"), nil
	}
	var b strings.Builder
	b.WriteString("package p\n\nfunc _() {\n")
	for line := range strings.Lines(src) {
		if line != "\n" {
			b.WriteByte('\t')
		}
		b.WriteString(line)
	}
	b.WriteString("}\n")
	out, err := format.Source([]byte(b.String()))
	if err != nil {
		return "", err
	}
	body := strings.TrimSuffix(strings.TrimPrefix(string(out), "package p\n\nfunc _() {\n"), "}\n")
	return dedent(body), nil
}

// exampleBodies returns the body of each Example function in file, without
// its braces and one level of indentation.
func exampleBodies(t *testing.T, file string) map[string]string {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && strings.HasPrefix(fn.Name.Name, "Example") {
			start := fset.Position(fn.Body.Lbrace).Offset + 2 // past "{\n"
			end := fset.Position(fn.Body.Rbrace).Offset
			bodies[fn.Name.Name] = dedent(string(src[start:end]))
		}
	}
	return bodies
}

func dedent(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(strings.TrimPrefix(line, "\t"))
	}
	return b.String()
}
