package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

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
)

// imageBinary builds the service with the Dockerfile's own command, once
// per test binary, and returns its path. It fails t if the build fails.
func imageBinary(t testing.TB) string {
	t.Helper()
	imageOnce.Do(func() {
		d := readDockerfile(t)
		if d.out == "" {
			imageErr = os.ErrNotExist
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

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }

// TestMain removes the image binary's directory once the tests are done,
// and reports the tests that skipped for want of Redis.
func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if imageBin != "" {
		os.RemoveAll(filepath.Dir(imageBin))
	}
	os.Exit(code)
}
