package ratekeeper_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocSnippetsCompile builds every ```go block of README.md and
// docs/*.md, so that none can rot. The blocks of one document make one
// package, each block a file of it:
//
//   - a block that begins with `package` is a whole file, built as is;
//   - a block of declarations (funcs, types) sits at the file's top level;
//   - any other block is the body of a function, with `_ = x` added for each
//     name it declares, as a reader would go on to use them.
//
// A block with its own import declarations keeps exactly those, so a
// missing or unused import fails; the others get the imports that their
// qualified names need (snippetImports). Names a fragment takes from the
// surrounding program (client, mux, lim, ctx, ...) are declared in
// snippetAmbient; the web frameworks the docs show are stand-ins with their
// real packages' signatures (snippetStubs), so that the lines using them
// compile without ratekeeper depending on them.
func TestDocSnippetsCompile(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"README.md"}, docs...)
	dir := t.TempDir()
	blocks := 0
	for _, doc := range docs {
		md, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range goBlocks(string(md)) {
			if err := snippetGofmt(b.code); err != nil {
				t.Errorf("%s:%d: %v", doc, b.line, err)
			}
		}
		n, err := writeSnippetPackage(dir, doc)
		if err != nil {
			t.Fatal(err)
		}
		blocks += n
	}
	if blocks == 0 {
		t.Fatal("found no ```go block")
	}
	if err := writeSnippetModule(dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the snippets of the docs do not compile (positions are in the docs):\n%s", out)
	}
	t.Logf("%d snippets of %d documents compile", blocks, len(docs))
}

// snippetGofmt returns an error unless code, a block, is as gofmt writes
// it: as a file, as declarations or as a function's body (one tab less).
func snippetGofmt(code string) error {
	imports, body := splitImports(code)
	var candidates []string
	if strings.HasPrefix(strings.TrimSpace(code), "package ") {
		candidates = []string{code}
	} else {
		candidates = []string{"package p\n\n" + code}
		indented := regexp.MustCompile(`(?m)^(.)`).ReplaceAllString(body, "\t$1")
		wrapped := "package p\n\n" + imports + "func _() {\n" + indented + "}\n"
		if imports != "" {
			wrapped = "package p\n\n" + imports + "\nfunc _() {\n" + indented + "}\n"
		}
		candidates = append(candidates, wrapped)
	}
	var err error
	for _, src := range candidates {
		var out []byte
		if out, err = format.Source([]byte(src)); err != nil {
			continue // not this shape
		}
		if string(out) != src {
			return fmt.Errorf("not gofmt-formatted; gofmt writes it:\n%s", out)
		}
		return nil
	}
	return err
}

// splitImports splits a block into its leading import declarations, with
// the blank lines after them, and the rest.
func splitImports(code string) (imports, rest string) {
	lines := strings.SplitAfter(code, "\n")
	n := 0
scan:
	for n < len(lines) {
		l := strings.TrimSpace(lines[n])
		switch {
		case l == "import (":
			for n < len(lines) && strings.TrimSpace(lines[n]) != ")" {
				n++
			}
			if n < len(lines) {
				n++
			}
		case strings.HasPrefix(l, "import "), l == "" && n > 0:
			n++
		default:
			break scan
		}
	}
	return strings.Join(lines[:n], ""), strings.Join(lines[n:], "")
}

// snippetBlock is one ```go block of a document.
type snippetBlock struct {
	line int // of the block's first line of code, 1-based
	code string
}

// goBlocks returns the ```go blocks of a Markdown document.
func goBlocks(md string) []snippetBlock {
	var blocks []snippetBlock
	var cur *snippetBlock
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```go":
			cur = &snippetBlock{line: i + 2}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return blocks
}

// writeSnippetPackage writes the blocks of doc as one package in a
// directory of dir, and returns how many there are.
func writeSnippetPackage(dir, doc string) (int, error) {
	md, err := os.ReadFile(doc)
	if err != nil {
		return 0, err
	}
	blocks := goBlocks(string(md))
	if len(blocks) == 0 {
		return 0, nil
	}
	name := "doc_" + regexp.MustCompile(`\W`).ReplaceAllString(strings.TrimSuffix(filepath.Base(doc), ".md"), "_")
	pkgDir := filepath.Join(dir, strings.ToLower(name))
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		return 0, err
	}
	files := map[string]string{"ambient.go": "package " + name + "\n\n" + snippetAmbient}
	for i, b := range blocks {
		src, err := snippetFile(name, doc, b)
		if err != nil {
			return 0, fmt.Errorf("%s:%d: %v", doc, b.line, err)
		}
		files[fmt.Sprintf("snippet%d.go", i+1)] = src
	}
	for f, src := range files {
		if err := os.WriteFile(filepath.Join(pkgDir, f), []byte(src), 0o644); err != nil {
			return 0, err
		}
	}
	return len(blocks), nil
}

// snippetFile returns the Go file that holds block b of the document at
// path doc, in package pkg, with line directives pointing into doc.
func snippetFile(pkg, doc string, b snippetBlock) (string, error) {
	lines := strings.SplitAfter(b.code, "\n")
	if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
		// A whole file: only its package clause changes.
		for i, l := range lines {
			if strings.HasPrefix(l, "package ") {
				lines[i] = "package " + pkg + "\n"
				break
			}
		}
		return fmt.Sprintf("//line %s:%d\n%s", doc, b.line, strings.Join(lines, "")), nil
	}
	// The block's own import declarations, if any, lead it.
	imports, code := splitImports(b.code)
	body := strings.Count(imports, "\n")
	if body == 0 {
		imports = autoImports(code)
	}
	head := fmt.Sprintf("package %s\n\n//line %s:%d\n%s\n", pkg, doc, b.line, imports)
	codeLine := b.line + body
	// Declarations stay at the top level.
	top := fmt.Sprintf("%s//line %s:%d\n%s", head, doc, codeLine, code)
	if _, err := parser.ParseFile(token.NewFileSet(), "", top, parser.SkipObjectResolution); err == nil {
		return top, nil
	}
	// Statements become a function's body.
	wrapped := fmt.Sprintf("%sfunc _() {\n//line %s:%d\n%s}\n", head, doc, codeLine, code)
	f, err := parser.ParseFile(token.NewFileSet(), "", wrapped, parser.SkipObjectResolution)
	if err != nil {
		return "", fmt.Errorf("neither declarations nor statements: %v", err)
	}
	fn := f.Decls[len(f.Decls)-1].(*ast.FuncDecl)
	var names []string
	for _, s := range fn.Body.List {
		switch s := s.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, e := range s.Lhs {
					names = append(names, e.(*ast.Ident).Name)
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, spec := range g.Specs {
					for _, n := range spec.(*ast.ValueSpec).Names {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	var uses strings.Builder
	for _, n := range names {
		if n != "_" {
			fmt.Fprintf(&uses, "\t_ = %s\n", n)
		}
	}
	return fmt.Sprintf("%sfunc _() {\n//line %s:%d\n%s%s}\n", head, doc, codeLine, code, uses.String()), nil
}

// snippetImports maps the package names that the docs' fragments use to
// their import paths.
var snippetImports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"log":         "log",
	"slog":        "log/slog",
	"time":        "time",
	"redis":       "github.com/redis/go-redis/v9",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"ratekeeper":  "github.com/ratekeeper/ratekeeper",
	"httplimit":   "github.com/ratekeeper/ratekeeper/httplimit",
	"memstore":    "github.com/ratekeeper/ratekeeper/memstore",
	"redisstore":  "github.com/ratekeeper/ratekeeper/redisstore",
	"metrics":     "github.com/ratekeeper/ratekeeper/metrics",
	"grpclimit":   "github.com/ratekeeper/ratekeeper/grpclimit",
	"grpc":        "google.golang.org/grpc",
	"codes":       "google.golang.org/grpc/codes",
	"status":      "google.golang.org/grpc/status",
	"metadata":    "google.golang.org/grpc/metadata",
	"errdetails":  "google.golang.org/genproto/googleapis/rpc/errdetails",
	"credentials": "google.golang.org/grpc/credentials",
	"ratelimit":   "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit",
	"echo":        "github.com/labstack/echo/v4",
	"gin":         "github.com/gin-gonic/gin",
}

// autoImports returns the import declaration that code's qualified names
// need, for a fragment that declares none.
func autoImports(code string) string {
	var paths []string
	for name, path := range snippetImports {
		if regexp.MustCompile(`(^|[^\w.])` + name + `\.\w`).MatchString(stripComments(code)) {
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return ""
	}
	sort.Strings(paths)
	return "import (\n\t\"" + strings.Join(paths, "\"\n\t\"") + "\"\n)\n"
}

// stripComments removes // comments, so that a package named in prose is
// not imported.
func stripComments(code string) string {
	return regexp.MustCompile(`(?m)//.*$`).ReplaceAllString(code, "")
}

// snippetAmbient declares the names that the docs' fragments take from the
// program around them.
const snippetAmbient = `import (
	"context"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

var (
	ctx    context.Context
	client *redis.Client
	mux    *http.ServeMux
	lim    *ratekeeper.Limiter
	policy ratekeeper.Policy

	// cfg is the application's configuration.
	cfg struct{ TrustedProxies []string }
	// auth is the application's authentication.
	auth struct {
		UserFrom func(context.Context) (struct{ ID string }, bool)
	}
	// r is a router of chi, gorilla/mux or gin, and e an echo server.
	r interface{ Use(...any) }
	e interface{ Use(...any) }
)
`

// snippetStubs are stand-ins for the web frameworks the docs show: only
// what the docs use, with the real packages' signatures.
var snippetStubs = map[string]string{
	"github.com/gin-gonic/gin": `package gin

import "net/http"

// Context stands for gin's Context.
type Context struct {
	Request *http.Request
	Writer  http.ResponseWriter
}

// Next stands for gin's Context.Next.
func (*Context) Next() {}

// Abort stands for gin's Context.Abort.
func (*Context) Abort() {}

// HandlerFunc stands for gin's HandlerFunc.
type HandlerFunc func(*Context)
`,
	"github.com/labstack/echo/v4": `package echo

import "net/http"

// HandlerFunc stands for echo's HandlerFunc.
type HandlerFunc func(Context) error

// Context stands for echo's Context.
type Context interface{}

// MiddlewareFunc stands for echo's MiddlewareFunc.
type MiddlewareFunc func(HandlerFunc) HandlerFunc

// WrapMiddleware stands for echo's WrapMiddleware.
func WrapMiddleware(func(http.Handler) http.Handler) MiddlewareFunc { return nil }
`,
}

// writeSnippetModule writes the go.mod of the snippets' module in dir: the
// metrics module's requirements (a superset of the root module's), the
// repository's modules in place of their releases, and the stand-ins.
func writeSnippetModule(dir string) error {
	root, err := filepath.Abs(".")
	if err != nil {
		return err
	}
	metricsMod, err := os.ReadFile(filepath.Join(root, "metrics", "go.mod"))
	if err != nil {
		return err
	}
	var mod bytes.Buffer
	for _, line := range strings.SplitAfter(string(metricsMod), "\n") {
		if strings.HasPrefix(line, "module ") {
			line = "module ratekeeper.example/docs\n"
		}
		mod.WriteString(line)
	}
	// The nested modules the docs show are replaced by their directories,
	// whose go.mod files bring their dependencies (gRPC for grpclimit).
	fmt.Fprintf(&mod, "\nreplace github.com/ratekeeper/ratekeeper => %s\n", root)
	for _, nested := range []string{"metrics", "grpclimit"} {
		fmt.Fprintf(&mod, "\nrequire github.com/ratekeeper/ratekeeper/%s v0.1.0\n", nested)
		fmt.Fprintf(&mod, "\nreplace github.com/ratekeeper/ratekeeper/%s => %s\n", nested, filepath.Join(root, nested))
	}
	for path, src := range snippetStubs {
		stub := filepath.Join(dir, "stub", strings.ReplaceAll(path, "/", "_"))
		if err := os.MkdirAll(stub, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(stub, "go.mod"), []byte("module "+path+"\n\ngo 1.25\n"), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(stub, "stub.go"), []byte(src), 0o644); err != nil {
			return err
		}
		version := "v0.0.0"
		if m := regexp.MustCompile(`/(v[2-9])$`).FindStringSubmatch(path); m != nil {
			version = m[1] + ".0.0"
		}
		fmt.Fprintf(&mod, "\nrequire %s %s\n\nreplace %s => %s\n", path, version, path, stub)
	}
	var sum []byte
	for _, f := range []string{"go.sum", "metrics/go.sum", "grpclimit/go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return err
		}
		sum = append(sum, b...)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "go.mod"), mod.Bytes(), 0o644)
}

// TestNoReplace: no nested module's go.mod has a replace directive, which
// would make `go install .../server/cmd/ratekeeper-server@version` fail
// for users; go.work's replace serves the repository instead.
func TestNoReplace(t *testing.T) {
	mods, err := filepath.Glob("*/go.mod")
	if err != nil || len(mods) < 4 {
		t.Fatalf("nested modules: %v, %v", mods, err)
	}
	for _, mod := range mods {
		b, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == "replace" {
				t.Errorf("%s:%d: %s (go install refuses a module with a replace; go.work has it)", mod, i+1, line)
			}
		}
	}
}

// TestRootSurface keeps the root package's summary (`go doc -short`) to
// at most 25 lines: the policies, the Limiter and what it returns. What
// only stores, services and forms need belongs to driver and catalog.
func TestRootSurface(t *testing.T) {
	out, err := exec.Command("go", "doc", "-short", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc -short: %v\n%s", err, out)
	}
	if lines := strings.Count(string(out), "\n"); lines > 25 {
		t.Errorf("go doc -short is %d lines, over 25:\n%s", lines, out)
	}
}
