package main

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/prebuilt"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// repoRoot is the repository's root, three levels above this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// dockerfile is the root Dockerfile: its RUN go build command, the
// directory it runs in, and the paths its final stage installs the
// binary at.
type dockerfile struct {
	text    string
	froms   []string
	build   string // the shell command of the go build
	dir     string // where it builds, from `cd DIR &&`
	pkg     string
	out     string   // the -o path
	copies  []string // where the final stage copies -o to
	user    string
	entry   string
	cgo0    bool
	workOff bool
}

func readDockerfile(t testing.TB) *dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	d := &dockerfile{text: string(b)}
	for _, line := range strings.Split(d.text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			d.froms = append(d.froms, f[1])
		case "RUN":
			if strings.Contains(line, "go build") {
				d.build = strings.TrimSpace(line[len("RUN"):])
			}
		case "COPY":
			if strings.HasPrefix(f[1], "--from=") && len(f) == 4 && f[2] == d.out {
				d.copies = append(d.copies, f[3])
			}
		case "USER":
			d.user = f[1]
		case "ENTRYPOINT":
			d.entry = strings.Join(f[1:], " ")
		}
		if d.build != "" && d.out == "" {
			if m := regexp.MustCompile(`^cd (\S+) && (.*)go build (.*)-o (\S+) (\S+)$`).FindStringSubmatch(d.build); m != nil {
				d.dir, d.out, d.pkg = m[1], m[4], m[5]
				d.cgo0 = strings.Contains(m[2], "CGO_ENABLED=0")
				d.workOff = strings.Contains(m[2], "GOWORK=off")
			}
		}
	}
	return d
}

// TestDockerfile checks what can be checked of the image without a
// container engine: a multi-stage build of this very package without
// cgo, onto a static base with CA certificates that runs as a non-root
// user, with the binary at the paths Envoy Gateway runs and
// docs/service.md names. TestEnvoyGatewayEnvironment runs the binary
// built by the Dockerfile's own command.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	if len(d.froms) < 2 {
		t.Errorf("stages: %v, want a build stage and a final one", d.froms)
	}
	if d.build == "" || d.out == "" {
		t.Fatalf("no `RUN cd DIR && ... go build ... -o OUT PKG` in the Dockerfile:\n%s", d.text)
	}
	wd, _ := os.Getwd()
	if got := filepath.Join(repoRoot(t), d.dir, d.pkg); got != wd {
		t.Errorf("the Dockerfile builds %s, not this package %s", got, wd)
	}
	if !d.cgo0 || d.workOff {
		t.Errorf("the build is not CGO_ENABLED=0 in the workspace (go.work gives it this tree's root module): %s", d.build)
	}
	if final := d.froms[len(d.froms)-1]; !strings.HasPrefix(final, "gcr.io/distroless/static") || !strings.HasSuffix(final, ":nonroot") {
		t.Errorf("final base %s: want distroless static (CA certificates, no shell), its nonroot tag", final)
	}
	if d.user == "" || strings.HasPrefix(d.user, "root") || strings.HasPrefix(d.user, "0") {
		t.Errorf("USER %q: want a non-root user", d.user)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "service.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"/bin/ratelimit": false, "/usr/local/bin/ratekeeper-server": false}
	for _, c := range d.copies {
		if _, ok := want[c]; ok {
			want[c] = true
		}
	}
	for path, copied := range want {
		if !copied {
			t.Errorf("the image has no %s (copies: %v)", path, d.copies)
		}
		if !strings.Contains(string(doc), "`"+path+"`") {
			t.Errorf("docs/service.md does not name %s", path)
		}
	}
	if !strings.Contains(d.entry, "/usr/local/bin/ratekeeper-server") {
		t.Errorf("ENTRYPOINT %s", d.entry)
	}
}

var (
	imageOnce sync.Once
	imageBin  string
	imageErr  error
	// imagePrebuilt: imageBin is make test's, which TestMain leaves.
	imagePrebuilt bool
)

// imageBinary builds the service with the Dockerfile's own command, once
// per test binary, and returns its path. It fails t if the build fails.
// make test runs that command once for the whole run (see
// internal/prebuilt) and hands its binary over in prebuilt.ServerEnv:
// imageBinary then checks that the binary's build settings are those the
// Dockerfile's command gives (builtBy), and uses it.
func imageBinary(t testing.TB) string {
	t.Helper()
	imageOnce.Do(func() {
		d := readDockerfile(t)
		if d.out == "" {
			imageErr = os.ErrNotExist
			return
		}
		if p, info, err := prebuilt.Server(false); p != "" || err != nil {
			if err == nil {
				err = builtBy(p, info, d)
			}
			imageBin, imageErr = p, err
			imagePrebuilt = true
			return
		}
		dir, err := os.MkdirTemp("", "ratekeeper-image-")
		if err != nil {
			imageErr = err
			return
		}
		imageBin = filepath.Join(dir, filepath.Base(d.out))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", strings.Replace(d.build, d.out, imageBin, 1))
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			imageErr = &buildError{err, out}
		}
	})
	if imageErr != nil {
		t.Fatalf("the Dockerfile's build: %v", imageErr)
	}
	return imageBin
}

// builtBy says how the build settings of info, a binary's, differ from
// those of the Dockerfile's go build command d.build: each of its flags
// (-trimpath, -ldflags=-s, ...) and each variable it sets that the go
// command records (CGO_ENABLED, GOOS, ...), with the workspace's own
// root module rather than a published one. nil means none differs.
func builtBy(path string, info *debug.BuildInfo, d *dockerfile) error {
	cmd, args, ok := strings.Cut(d.build, "go build ")
	if !ok {
		return fmt.Errorf("no go build in %q", d.build)
	}
	var diffs []string
	want := func(key, value string) {
		if got, ok := prebuilt.Setting(info, key); !ok || got != value {
			diffs = append(diffs, fmt.Sprintf("%s=%q (the binary has %q)", key, value, got))
		}
	}
	for _, f := range strings.Fields(cmd) {
		k, v, ok := strings.Cut(f, "=")
		if ok && (k == "CGO_ENABLED" || strings.HasPrefix(k, "GO")) && k != "GOWORK" && k != "GOFLAGS" {
			want(k, v)
		}
	}
	fields := strings.Fields(args)
	asked := map[string]bool{"-buildmode": true, "-compiler": true} // recorded by default
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		k, _, _ := strings.Cut(f, "=")
		asked[k] = true
		switch {
		case f == "-o":
			i++ // its value, the output path, is the test's own
		case f == "-v" || f == "-x":
			// Output only: they change nothing in the binary.
		case strings.HasPrefix(f, "-ldflags="):
			if trimpath, _ := prebuilt.Setting(info, "-trimpath"); trimpath != "true" {
				want("-ldflags", strings.TrimPrefix(f, "-ldflags="))
			} else if err := stripped(f, path); err != nil {
				// Under -trimpath the go command does not record
				// -ldflags: their effect is what can be checked.
				diffs = append(diffs, err.Error())
			}
		case strings.HasPrefix(f, "-"):
			if k, v, ok := strings.Cut(f, "="); ok {
				want(k, v)
			} else {
				want(f, "true")
			}
		}
	}
	for _, st := range info.Settings {
		if strings.HasPrefix(st.Key, "-") && !asked[st.Key] {
			diffs = append(diffs, fmt.Sprintf("%s=%q, which the command does not ask for", st.Key, st.Value))
		}
	}
	if info.Path != prebuilt.ServerPackage {
		diffs = append(diffs, fmt.Sprintf("main package %s, want %s", info.Path, prebuilt.ServerPackage))
	}
	for _, m := range info.Deps {
		if m.Path == "github.com/ratekeeper/ratekeeper" && m.Replace == nil && m.Version != "(devel)" {
			diffs = append(diffs, fmt.Sprintf("%s %s, not the workspace's own", m.Path, m.Version))
		}
	}
	if diffs != nil {
		return fmt.Errorf("%s is not the build of the Dockerfile's command %q: %s",
			prebuilt.ServerEnv, d.build, strings.Join(diffs, "; "))
	}
	return nil
}

// stripped checks the effect of ldflags, a -ldflags= flag that the go
// command did not record, on the binary at path: -s and -w, the only
// flags it knows, leave no symbol table and no DWARF.
func stripped(ldflags, path string) error {
	for _, f := range strings.Fields(strings.Trim(strings.TrimPrefix(ldflags, "-ldflags="), `"'`)) {
		if f != "-s" && f != "-w" {
			return fmt.Errorf("%s: %s cannot be checked on a built binary", ldflags, f)
		}
	}
	ef, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %v", ldflags, err)
	}
	defer ef.Close()
	for _, name := range []string{".symtab", ".debug_info"} {
		if ef.Section(name) != nil {
			return fmt.Errorf("%s: the binary has a %s section", ldflags, name)
		}
	}
	return nil
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }

// TestMain removes the image binary's directory once the tests are done,
// and reports the tests that skipped for want of Redis.
func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if imageBin != "" && !imagePrebuilt {
		os.RemoveAll(filepath.Dir(imageBin))
	}
	os.Exit(code)
}

// TestBuiltBy checks that builtBy tells the Dockerfile's build from
// another: this test binary (with cgo, without -trimpath, symbols kept)
// is not it; and make test's prebuilt binary, when there is one, is it,
// but not that of a Dockerfile whose command asks for other settings.
func TestBuiltBy(t *testing.T) {
	d := readDockerfile(t)
	if d.build == "" {
		t.Fatal("no go build in the Dockerfile")
	}
	self, err := prebuilt.Self()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := builtBy(exe, self, d); err == nil || !strings.Contains(err.Error(), "-trimpath") {
		t.Errorf("this test binary: %v, want it told apart by -trimpath at least", err)
	}
	p, info, err := prebuilt.Server(false)
	if err != nil {
		t.Fatal(err)
	}
	if p == "" {
		t.Logf("%s is unset: TestEnvoyGatewayEnvironment builds with the Dockerfile's command itself", prebuilt.ServerEnv)
		return
	}
	if err := builtBy(p, info, d); err != nil {
		t.Error(err)
	}
	for _, other := range []string{
		strings.Replace(d.build, "go build ", "go build -tags=other ", 1),
		strings.Replace(d.build, "CGO_ENABLED=0", "CGO_ENABLED=1", 1),
		strings.Replace(d.build, "-ldflags=-s", "-ldflags=-X=main.v=1", 1),
		strings.Replace(d.build, "-trimpath", "", 1),
	} {
		o := *d
		o.build = other
		if other == d.build {
			t.Fatalf("the Dockerfile's command %q did not change", other)
		}
		if err := builtBy(p, info, &o); err == nil {
			t.Errorf("%s: the prebuilt binary passes for %q", prebuilt.ServerEnv, other)
		}
	}
}
