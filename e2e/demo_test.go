// Package e2e drives the demo server's page in headless Chromium: it
// builds cmd/ratekeeper-demo, starts it, and uses the page as a visitor
// would. It is a module of its own, so that the browser driver's
// dependencies never reach ratekeeper's users.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testio"
)

const (
	chromiumPath = "/usr/bin/chromium" // Debian's package chromium
	// envRequired makes a missing browser a failure rather than a skip;
	// `make test` sets it.
	envRequired = "RATEKEEPER_E2E"
	// screenshot is where the README's picture of the page is saved.
	screenshot = "../docs/demo.png"
)

func TestDemoPage(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv(envRequired) != "" {
			t.Fatalf("%s is required (%s is set) but missing: install Debian's chromium (apt-get install chromium), as .ci/run does", chromiumPath, envRequired)
		}
		t.Skipf("%s not found: install Debian's chromium (apt-get install chromium) to run the browser test; `make test` requires it", chromiumPath)
	}
	base, backend := startDemo(t)
	ctx := newBrowser(t)
	page := &page{t: t, ctx: ctx}
	page.listen()

	page.do("open the page", chromedp.Navigate(base+"/"))
	page.waitJS("the first state", `document.body.dataset.ready === "true"`)
	badge := page.text("#backend")
	want := "in-process store: set REDIS_URL to share limits across servers"
	if backend == "redis" {
		want = "Redis at "
	}
	if !strings.Contains(badge, want) {
		t.Errorf("backend badge %q, want %q", badge, want)
	}

	// The picker shows the chosen algorithm's fields, and only those.
	page.selectAlgorithm("gcra")
	page.waitJS("the GCRA fields", `!document.getElementById("gcra-rate").closest("fieldset").hidden &&
		document.getElementById("tb-capacity").closest("fieldset").hidden`)
	page.selectAlgorithm("token_bucket")

	// An invalid value gets the server's message, next to its field.
	page.do("enter capacity 0",
		chromedp.SetValue(chromedp.CSS("#tb-capacity"), "0"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the inline error", `document.getElementById("tb-capacity-error").textContent !== ""`)
	if msg := page.text("#tb-capacity-error"); !strings.Contains(msg, "TokenBucket Capacity must be between 1 and") {
		t.Errorf("inline error %q", msg)
	}
	if invalid := page.eval(`document.getElementById("tb-capacity").getAttribute("aria-invalid")`); invalid != "true" {
		t.Errorf("capacity 0: aria-invalid %q", invalid)
	}

	// A token bucket of 5, refilled by 1 every second.
	page.do("configure capacity 5, 1 per 1 s",
		chromedp.SetValue(chromedp.CSS("#tb-capacity"), "5"),
		chromedp.SetValue(chromedp.CSS("#tb-refill_rate"), "1"),
		chromedp.SetValue(chromedp.CSS("#tb-refill_interval"), "1"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the new policy", `document.getElementById("summary").textContent.includes("Bursts of up to 5, then 1 every 1 s")`)
	if msg := page.text("#tb-capacity-error"); msg != "" {
		t.Errorf("the inline error stayed: %q", msg)
	}
	page.waitJS("a full bucket of 5", `document.getElementById("level").dataset.remaining === "5" &&
		document.getElementById("limit").textContent === "5"`)

	// Submit until a request is denied.
	allowed := 0
	for outcome := ""; outcome != "denied"; {
		if allowed == 10 {
			t.Fatalf("10 requests allowed by a bucket of 5")
		}
		seq := page.eval(`document.getElementById("result").dataset.seq`)
		page.do("submit a request", chromedp.Click(chromedp.CSS("#submit")))
		page.waitJS("the result", fmt.Sprintf(`document.getElementById("result").dataset.seq !== %q`, seq))
		outcome = page.eval(`document.getElementById("result").dataset.outcome`)
		switch outcome {
		case "allowed":
			allowed++
		case "denied":
		default:
			t.Fatalf("request %d: outcome %q: %s", allowed+1, outcome, page.text("#result"))
		}
	}
	if allowed < 1 {
		t.Errorf("the first request was denied")
	}
	if result := page.text("#result"); !strings.Contains(result, "Denied") || !strings.Contains(result, "429 Too Many Requests") {
		t.Errorf("the page shows %q for a denial", result)
	}
	if status := page.text("#status-line"); status != "HTTP 429 Too Many Requests" {
		t.Errorf("status line %q", status)
	}
	headers := page.eval(`Array.from(document.querySelectorAll("#headers tr"),
		(tr) => tr.cells[0].textContent + ": " + tr.cells[1].textContent).join("\n")`)
	for _, want := range []string{`RateLimit-Policy: "token_bucket";q=5;w=5`, `RateLimit: "token_bucket";r=0;t=1`, "Retry-After: 1", "X-RateLimit-Limit: 5", "X-RateLimit-Remaining: 0", "X-RateLimit-Reset: 1"} {
		if !strings.Contains("\n"+headers, "\n"+want) {
			t.Errorf("the headers shown lack %q:\n%s", want, headers)
		}
	}

	// The level refills on its own, without another request.
	before := page.number(`Number(document.getElementById("level").dataset.remaining)`)
	seq := page.eval(`document.getElementById("result").dataset.seq`)
	time.Sleep(1500 * time.Millisecond)
	after := page.number(`Number(document.getElementById("level").dataset.remaining)`)
	if after <= before {
		t.Errorf("the level went from %v to %v in 1.5 s: no refill shown", before, after)
	}
	if page.eval(`document.getElementById("result").dataset.seq`) != seq {
		t.Error("a request was sent while watching the level")
	}
	if gauge := page.number(`Number(document.getElementById("gauge").getAttribute("aria-valuenow"))`); gauge <= before {
		t.Errorf("the gauge stayed at %v", gauge)
	}

	// The scenarios: a burst, then a steady stream.
	page.do("burst 8",
		chromedp.SetValue(chromedp.CSS("#burst-n"), "8"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("burst-n").dispatchEvent(new Event("input"))`),
		chromedp.Click(chromedp.CSS("#burst")))
	page.waitJS("the burst's summary", `/^Burst of 8: \d+ allowed, \d+ denied\.$/.test(document.getElementById("scenario-result").textContent)`)
	page.do("steady 4/s for 1.5 s",
		chromedp.SetValue(chromedp.CSS("#steady-r"), "4"),
		chromedp.SetValue(chromedp.CSS("#steady-s"), "1.5"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("steady-s").dispatchEvent(new Event("input"))`),
		chromedp.Click(chromedp.CSS("#steady")))
	page.waitJS("the steady stream's summary", `/^Steady 4\/s for 1.5 s: \d+ allowed, \d+ denied\.$/.test(document.getElementById("scenario-result").textContent)`)
	counts := page.text("#counts")
	var nAllowed, nDenied int
	if _, err := fmt.Sscanf(counts, "%d allowed · %d denied", &nAllowed, &nDenied); err != nil || nAllowed+nDenied != allowed+1+8+6 {
		t.Errorf("counts %q after %d requests", counts, allowed+1+8+6)
	}

	time.Sleep(700 * time.Millisecond) // some refill on the chart
	png := page.screenshot()
	if err := os.WriteFile(screenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d bytes)", screenshot, len(png))
	page.checkErrors()
}

// page runs steps in the browser, each with a deadline, and fails the test
// on the first error.
type page struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string // exceptions and console errors of the page
}

const stepTimeout = 15 * time.Second

func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

func (p *page) waitJS(what, predicate string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		p.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression as text.
func (p *page) eval(expr string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`String(`+expr+`)`))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (p *page) number(expr string) float64 {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[float64](expr))
	if err != nil {
		p.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func (p *page) text(css string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(css)))
	if err != nil {
		p.t.Fatalf("reading %s: %v", css, err)
	}
	return strings.TrimSpace(v)
}

func (p *page) selectAlgorithm(name string) {
	p.t.Helper()
	p.do("choose "+name,
		chromedp.SetValue(chromedp.CSS("#algorithm"), name),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("algorithm").dispatchEvent(new Event("change"))`))
}

func (p *page) screenshot() []byte {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	return png
}

// listen records the page's uncaught exceptions and console errors, such
// as a refused resource. Failed responses are left out: a 429 or a 400 is
// logged as a network error, and the test causes both on purpose.
func (p *page) listen() {
	err := chromedp.Listen(p.ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level != log.EntryLevelError || ev.Entry.Source == log.EntrySourceNetwork {
				return
			}
			msg = fmt.Sprintf("%s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
		default:
			return
		}
		p.mu.Lock()
		p.errors = append(p.errors, msg)
		p.mu.Unlock()
	})
	if err != nil {
		p.t.Fatalf("listening to the page: %v", err)
	}
}

func (p *page) checkErrors() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errors {
		p.t.Errorf("page error: %s", e)
	}
}

// newBrowser starts a headless Chromium for t, closed when t ends.
func newBrowser(t *testing.T) context.Context {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox, // root in CI containers
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first call starts the browser; it must not carry a deadline, which
	// would end the browser with it.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v", chromiumPath, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not start within 30 s", chromiumPath)
	}
	return ctx
}

// startDemo builds the demo server and runs it on a free loopback port,
// with the test Redis when there is one, and stops it when t ends. It
// returns the server's URL and its backend.
func startDemo(t *testing.T) (url, backend string) {
	bin := filepath.Join(t.TempDir(), "ratekeeper-demo")
	build, cancelBuild := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelBuild()
	// With the race detector: the browser's requests are the concurrency
	// that the server tests cannot make up.
	cmd := exec.CommandContext(build, "go", "build", "-race", "-o", bin, "./cmd/ratekeeper-demo")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ratekeeper-demo: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") && !strings.HasPrefix(kv, "PORT=") {
			env = append(env, kv)
		}
	}
	backend = "memory"
	if redisAddr := os.Getenv(redistest.EnvAddr); redisAddr != "" {
		env = append(env, "REDIS_URL=redis://"+redisAddr)
		backend = "redis"
	}
	var logs testio.SyncBuffer
	server := exec.Command(bin, "-addr", addr)
	server.Env = env
	server.Stdout, server.Stderr = &logs, &logs
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	t.Cleanup(func() {
		// SIGTERM, as a service manager would: the server must shut down
		// cleanly and promptly.
		server.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the demo server exited with %v on SIGTERM", err)
			}
		case <-time.After(15 * time.Second):
			server.Process.Kill()
			<-exited
			t.Error("the demo server did not stop within 15 s of SIGTERM")
		}
		out := logs.String()
		if strings.Contains(out, "DATA RACE") {
			t.Error("the demo server raced")
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("demo server log:\n%s", out)
		}
	})

	url = "http://" + addr
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := client.Get(url + "/state")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, backend
			}
			err = errors.New(resp.Status)
		}
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			t.Fatalf("the demo server exited: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo server did not answer at %s within 15 s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
