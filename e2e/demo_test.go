// Package e2e drives the demo server's page in headless Chromium: it
// builds cmd/ratekeeper-demo, starts it, and uses the page as a visitor
// would. It is a module of its own, so that the browser driver's
// dependencies never reach ratekeeper's users.
package e2e

import (
	"context"
	"encoding/json"
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

	"github.com/ratekeeper/ratekeeper/internal/prebuilt"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

const (
	chromiumPath = "/usr/bin/chromium" // Debian's package chromium
	// envRequired makes a missing browser a failure rather than a skip;
	// `make test` sets it.
	envRequired = "RATEKEEPER_E2E"
	// envShots names a directory to keep the test's screenshots in; by
	// default they go to a temporary one, removed after the test.
	envShots = "RATEKEEPER_E2E_SCREENSHOTS"
	// envPicture names the file to save the README's picture of the page
	// to: `make screenshot` sets it to docs/demo.png.
	envPicture = "RATEKEEPER_SCREENSHOT"
	// pictureAddr is the Redis address the README's picture shows: the
	// one a newcomer's `make demo` finds, rather than the test's random
	// port, so that the picture changes only when the page does.
	pictureAddr = "localhost:6379"
)

// Widths the page is checked at: a laptop's and a phone's.
const (
	wide   = 1280
	narrow = 400
	height = 900
)

func requireBrowser(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv(envRequired) != "" {
			t.Fatalf("%s is required (%s is set) but missing: install Debian's chromium (apt-get install chromium), as .ci/run does", chromiumPath, envRequired)
		}
		t.Skipf("%s not found: install Debian's chromium (apt-get install chromium) to run the browser test; `make test` requires it", chromiumPath)
	}
}

func TestDemoPage(t *testing.T) {
	requireBrowser(t)
	redisAddr := os.Getenv(redistest.EnvAddr)
	base, _ := startDemo(t, redisAddr)
	ctx := newBrowser(t)
	page := &page{t: t, ctx: ctx, shots: shotsDir(t)}
	page.listen()

	page.do("open the page", chromedp.Navigate(base+"/"))
	page.waitJS("the first state", `document.body.dataset.ready === "true"`)
	badge := page.text("#backend")
	want := "in-process store: set REDIS_URL to share limits across servers"
	if redisAddr != "" {
		want = "Redis at " + redisAddr + ": limits shared across servers"
	}
	if badge != want {
		t.Errorf("backend badge %q, want %q", badge, want)
	}
	if live := page.text("#live"); live != "live" {
		t.Errorf("the live dot says %q", live)
	}

	// A first visit says what to do, in the result and on the empty
	// timeline, with the scenarios in view on a laptop's screen.
	if result := page.text("#result"); !strings.Contains(result, "Submit Request") {
		t.Errorf("a first visit's result says %q, with no hint", result)
	}
	page.waitJS("the empty timeline's hint", `document.getElementById("timeline").dataset.empty === "true"`)
	if dt := page.text(".facts div:nth-child(3) dt"); dt != "Sent from this tab" {
		t.Errorf("the counter is labelled %q, not as this tab's", dt)
	}
	for _, width := range []int64{wide, 1000} {
		page.resize(width)
		if top := page.number(`document.getElementById("burst").getBoundingClientRect().bottom`); top > height {
			t.Errorf("at %d px the scenarios' first button is below the fold (%v px)", width, top)
		}
	}
	page.resize(wide)

	checkFormFromTable(t, page, base)

	// The picker shows the chosen algorithm's fields, and only those.
	page.selectAlgorithm("gcra")
	page.waitJS("the GCRA fields", `!document.getElementById("gcra-rate").closest("fieldset").hidden &&
		document.getElementById("tb-capacity").closest("fieldset").hidden`)
	page.selectAlgorithm("token_bucket")

	// An invalid value gets the server's message, in words, once: next to
	// its field.
	page.do("enter capacity -1",
		chromedp.SetValue(chromedp.CSS("#tb-capacity"), "-1"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the inline error", `document.getElementById("tb-capacity-error").textContent !== ""`)
	if msg := page.text("#tb-capacity-error"); msg != "Capacity must be a whole number from 1 to 1,000,000,000." {
		t.Errorf("inline error %q", msg)
	}
	if shown := page.number(`document.body.innerText.split("Capacity must be a whole number").length - 1`); shown != 1 {
		t.Errorf("the capacity error is shown %v times", shown)
	}
	if invalid := page.eval(`document.getElementById("tb-capacity").getAttribute("aria-invalid")`); invalid != "true" {
		t.Errorf("capacity -1: aria-invalid %q", invalid)
	}
	page.do("enter refill interval 1e12",
		chromedp.SetValue(chromedp.CSS("#tb-capacity"), "5"),
		chromedp.SetValue(chromedp.CSS("#tb-refill_interval"), "1e12"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the refill interval's error", `document.getElementById("tb-refill_interval-error").textContent !== ""`)
	if msg := page.text("#tb-refill_interval-error"); msg != "Refill interval must be at most 315,360,000 seconds (10 years)." {
		t.Errorf("refill interval 1e12: %q", msg)
	}

	// A token bucket of 5, refilled by 1 every second; then a reset at
	// once, whose label must not print over the policy's.
	page.do("configure capacity 5, 1 per 1 s",
		chromedp.SetValue(chromedp.CSS("#tb-capacity"), "5"),
		chromedp.SetValue(chromedp.CSS("#tb-refill_rate"), "1"),
		chromedp.SetValue(chromedp.CSS("#tb-refill_interval"), "1"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the new policy", `document.getElementById("summary").textContent.includes("Bursts of up to 5, then 1 every 1 s")`)
	page.do("reset", chromedp.Click(chromedp.CSS("#reset")))
	page.waitJS("the reset", `document.getElementById("scenario-result").textContent.startsWith("Reset")`)
	for _, id := range []string{"#tb-capacity-error", "#tb-refill_interval-error", "#config-error"} {
		if msg := page.text(id); msg != "" {
			t.Errorf("%s stayed: %q", id, msg)
		}
	}
	page.waitJS("a full bucket of 5", `document.getElementById("level").dataset.remaining === "5" &&
		document.getElementById("limit").textContent === "5"`)
	page.checkLabels("policy", "reset")

	// Submit until a request is denied. The bucket refills by one a
	// second meanwhile, and clicks on a busy machine can be slow.
	allowed := 0
	drainStart := time.Now()
	for outcome := ""; outcome != "denied"; {
		if bound := 5 + int(time.Since(drainStart)/time.Second) + 1; allowed > bound {
			t.Fatalf("%d requests allowed in %v by a bucket of 5 refilled by 1 a second", allowed, time.Since(drainStart))
		}
		if allowed == 40 {
			t.Fatalf("40 requests allowed: the page's clicks are slower than the refill")
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

	// An invalid burst says why under its field, sends nothing and clears
	// the previous result.
	page.do("burst 0",
		chromedp.SetValue(chromedp.CSS("#burst-n"), "0"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("burst-n").dispatchEvent(new Event("input"))`),
		chromedp.Click(chromedp.CSS("#burst")))
	page.waitJS("the burst's error", `document.getElementById("burst-n-error").textContent !== ""`)
	if msg := page.text("#burst-n-error"); msg != "Requests at once must be a whole number from 1 to 200." {
		t.Errorf("burst 0: %q", msg)
	}
	if got := page.text("#scenario-result"); got != "" {
		t.Errorf("burst 0 left %q on screen", got)
	}
	if page.eval(`document.getElementById("result").dataset.seq`) != seq {
		t.Error("an invalid burst sent requests")
	}

	// The scenarios: a burst, then a steady stream.
	page.do("burst 8",
		chromedp.SetValue(chromedp.CSS("#burst-n"), "8"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("burst-n").dispatchEvent(new Event("input"))`),
		chromedp.Click(chromedp.CSS("#burst")))
	page.waitJS("the burst's summary", `/^Burst of 8: \d+ allowed, \d+ denied\.$/.test(document.getElementById("scenario-result").textContent)`)
	if msg := page.text("#burst-n-error"); msg != "" {
		t.Errorf("the burst's error stayed: %q", msg)
	}
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
	// Every request is on the timeline, one mark each, however close.
	page.checkRequests(nAllowed, nDenied)
	if empty := page.eval(`document.getElementById("timeline").dataset.empty`); empty != "false" {
		t.Errorf("the timeline's hint stays after requests (empty %q)", empty)
	}

	// A job whose cost is known when it is done drives the level below
	// zero, drawn below the timeline's zero line, and time repays it.
	page.do("reset", chromedp.Click(chromedp.CSS("#reset")))
	page.waitJS("the reset", `document.getElementById("scenario-result").textContent.startsWith("Reset")`)
	page.do("a job of 15",
		chromedp.SetValue(chromedp.CSS("#job-cost"), "15"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("job-cost").dispatchEvent(new Event("input"))`),
		chromedp.Click(chromedp.CSS("#job")))
	page.waitJS("the job's summary", `/^Job of 15: admitted, then charged 15 when done: −?-?[\d.]+ left, [\d.]+ in debt/.test(document.getElementById("scenario-result").textContent)`)
	debt := page.number(`Number(document.getElementById("level").dataset.remaining)`)
	if debt > -10 || debt < -11 {
		t.Errorf("after a job of 15 on a bucket of 5: %v left, want about -11", debt)
	}
	if cls := page.eval(`document.getElementById("gauge").className`); !strings.Contains(cls, "debt") {
		t.Errorf("the gauge in debt has classes %q", cls)
	}
	page.waitJS("the debt below the zero line", `Number(document.getElementById("timeline").dataset.floor) < -10`)
	time.Sleep(1500 * time.Millisecond)
	if repaid := page.number(`Number(document.getElementById("level").dataset.remaining)`); repaid <= debt {
		t.Errorf("the debt went from %v to %v in 1.5 s: not repaid by time", debt, repaid)
	}

	// Leases: the key is decided in process, with fewer store calls than
	// decisions; then off again.
	page.do("leases on",
		chromedp.Click(chromedp.CSS("#leases")),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the leases applied", `document.getElementById("current").textContent.includes("50 ms")`)
	page.do("burst 20 with leases",
		chromedp.SetValue(chromedp.CSS("#burst-n"), "20"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("burst-n").dispatchEvent(new Event("input"))`),
		chromedp.Click(chromedp.CSS("#burst")))
	page.waitJS("the store calls counted", `/^\d+ calls? for 20 decisions$/.test(document.getElementById("calls").textContent)`)
	if calls := page.number(`parseInt(document.getElementById("calls").textContent)`); calls >= 20 {
		t.Errorf("with leases: %q, want fewer store calls than decisions", page.text("#calls"))
	}
	page.do("leases off",
		chromedp.Click(chromedp.CSS("#leases")),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the leases off", `document.getElementById("current").textContent.includes("leasesoff")`)

	time.Sleep(700 * time.Millisecond) // some refill on the chart
	page.checkLayout(wide)
	page.save("up-1280.png")
	if path := os.Getenv(envPicture); path != "" {
		// The picture shows the policy a first run shows.
		page.do("the default policy",
			chromedp.SetValue(chromedp.CSS("#tb-capacity"), "10"),
			chromedp.SetValue(chromedp.CSS("#tb-refill_rate"), "1"),
			chromedp.SetValue(chromedp.CSS("#tb-refill_interval"), "1"),
			chromedp.Click(chromedp.CSS("#apply")))
		page.waitJS("the default policy", `document.getElementById("summary").textContent.includes("Bursts of up to 10, then 1 every 1 s")`)
		page.do("burst 12",
			chromedp.SetValue(chromedp.CSS("#burst-n"), "12"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById("burst-n").dispatchEvent(new Event("input"))`),
			chromedp.Click(chromedp.CSS("#burst")))
		page.waitJS("the burst's summary", `/^Burst of 12: /.test(document.getElementById("scenario-result").textContent)`)
		time.Sleep(2500 * time.Millisecond) // some refill on the chart
		page.savePicture(path, redisAddr)
	}
	page.resize(narrow)
	page.checkLayout(narrow)
	page.save("up-400.png")
	page.checkErrors()
}

// TestDemoPageCalendar: the fixed window's calendar period and time zone,
// set in the form, make the policy card say so; an unknown zone is
// refused under its field; another algorithm hides them.
func TestDemoPageCalendar(t *testing.T) {
	requireBrowser(t)
	base, _ := startDemo(t, os.Getenv(redistest.EnvAddr))
	page := &page{t: t, ctx: newBrowser(t), shots: shotsDir(t)}
	page.listen()
	page.do("open the page", chromedp.Navigate(base+"/"))
	page.waitJS("the first state", `document.body.dataset.ready === "true"`)
	if hidden := page.eval(`String(document.getElementById("calendar-field").hidden)`); hidden != "true" {
		t.Errorf("the token bucket shows the calendar field (hidden %s)", hidden)
	}
	page.do("the fixed window",
		chromedp.SetValue(chromedp.CSS("#algorithm"), "fixed_window"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("algorithm").dispatchEvent(new Event("change"))`))
	page.do("a month in Mars",
		chromedp.SetValue(chromedp.CSS("#calendar"), "month"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("calendar").dispatchEvent(new Event("change"))`),
		chromedp.SetValue(chromedp.CSS("#time_zone"), "Mars/Olympus"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the zone's error", `document.getElementById("time_zone-error").textContent.includes("There is no time zone")`)
	page.do("a month in Berlin",
		chromedp.SetValue(chromedp.CSS("#time_zone"), "Europe/Berlin"),
		chromedp.Click(chromedp.CSS("#apply")))
	page.waitJS("the calendar policy", `document.getElementById("summary").textContent.includes("per calendar month in Europe/Berlin")`)
	if disabled := page.eval(`String(document.getElementById("fw-window").disabled)`); disabled != "true" {
		t.Errorf("the window's length stays editable beside a calendar period (disabled %s)", disabled)
	}
	page.submit("allowed")
	page.checkErrors()
}

// TestDemoPageRedisDown kills the demo's Redis mid-session, then starts it
// again, on a Redis of its own: the page names Redis as down, its live dot
// shows it, the policy stays on screen, requests fail promptly, and all
// recovers when Redis is back.
func TestDemoPageRedisDown(t *testing.T) {
	requireBrowser(t)
	srv := redistest.StartServer(t)
	base, _ := startDemo(t, srv.Addr)
	ctx := newBrowser(t)
	page := &page{t: t, ctx: ctx, shots: shotsDir(t)}
	page.listen()

	page.do("open the page", chromedp.Navigate(base+"/"))
	page.waitJS("the first state", `document.body.dataset.ready === "true" && document.body.dataset.store === "up"`)
	up := "Redis at " + srv.Addr + ": limits shared across servers"
	if badge := page.text("#backend"); badge != up {
		t.Errorf("badge %q, want %q", badge, up)
	}
	page.submit("allowed")

	srv.Stop()
	page.waitJS("the outage", `document.body.dataset.store === "down"`)
	down := "Redis at " + srv.Addr + " is down: requests fail until it is back"
	checkDown := func() {
		t.Helper()
		if badge := page.text("#backend"); badge != down {
			t.Errorf("badge %q with Redis down, want %q", badge, down)
		}
		if live, class := page.text("#live"), page.eval(`document.getElementById("live").className`); live != "Redis down" || class != "live down" {
			t.Errorf("the live dot says %q (class %q) with Redis down", live, class)
		}
		if summary := page.text("#summary"); !strings.Contains(summary, "Bursts of up to 10") {
			t.Errorf("the policy card shows %q with Redis down", summary)
		}
		if level := page.text("#level"); level != "–" {
			t.Errorf("the level shows %q with Redis down", level)
		}
	}
	checkDown()
	// Fast failures, and a message that names Redis.
	took := page.submit("error")
	if took > 2500*time.Millisecond {
		t.Errorf("a request took %v to fail with Redis down", took)
	}
	if result := page.text("#result"); !strings.Contains(result, "Redis at "+srv.Addr+" is not answering") {
		t.Errorf("the result with Redis down: %q", result)
	}
	start := time.Now()
	page.do("burst 5",
		chromedp.SetValue(chromedp.CSS("#burst-n"), "5"),
		chromedp.Click(chromedp.CSS("#burst")))
	page.waitJS("the burst's summary", `document.getElementById("scenario-result").textContent === "Burst of 5: 0 allowed, 0 denied, 5 errors."`)
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Errorf("a burst of 5 took %v to fail with Redis down", took)
	}
	t.Logf("with Redis down, as the page shows them: a request failed in %v, a burst of 5 in %v", took, time.Since(start))
	// The server's part, timed by the browser.
	for _, call := range []string{`"/test", {method: "POST"}`, `"/state"`, `"/reset", {method: "POST"}`} {
		var slowest float64
		for range 5 {
			ms, err := chromedp.Run(page.ctx, chromedp.Evaluate[float64](`(async () => {
				const start = performance.now();
				const resp = await fetch(`+call+`);
				if (resp.status !== 503) throw new Error("status " + resp.status);
				return performance.now() - start;
			})()`, chromedp.EvalAwaitPromise))
			if err != nil {
				t.Fatalf("fetch(%s) with Redis down: %v", call, err)
			}
			slowest = max(slowest, ms)
		}
		// Generous: the point is no wait of seconds.
		if slowest > 2500 {
			t.Errorf("fetch(%s) with Redis down took up to %.0f ms", call, slowest)
		}
		t.Logf("fetch(%s) with Redis down: 503 within %.0f ms (slowest of 5)", call, slowest)
	}
	page.save("down-mid-session-1280.png")
	// A page opened during the outage shows the policy too.
	page.do("reload", chromedp.Reload())
	page.waitJS("the state after reloading", `document.body.dataset.store === "down"`)
	page.waitJS("the policy after reloading", `document.getElementById("summary").textContent.includes("Bursts of up to 10")`)
	checkDown()
	page.checkLayout(wide)
	page.save("down-1280.png")
	page.resize(narrow)
	checkDown()
	page.checkLayout(narrow)
	page.save("down-400.png")

	srv.Restart()
	page.waitJS("Redis back", `document.body.dataset.store === "up"`)
	if badge := page.text("#backend"); badge != up {
		t.Errorf("badge %q after Redis is back, want %q", badge, up)
	}
	if live, class := page.text("#live"), page.eval(`document.getElementById("live").className`); live != "live" || class != "live" {
		t.Errorf("the live dot says %q (class %q) after Redis is back", live, class)
	}
	page.submit("allowed")
	page.checkLabels("Redis down", "back")
	page.checkLayout(narrow)
	page.save("back-400.png")
	page.resize(wide)
	page.checkLayout(wide)
	page.save("back-1280.png")
	page.checkErrors()
}

// page runs steps in the browser, each with a deadline, and fails the test
// on the first error.
type page struct {
	t      *testing.T
	ctx    context.Context
	shots  string // the directory for screenshots
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

// submit sends one request from the page and checks its outcome; it
// returns how long the answer took to show.
func (p *page) submit(want string) time.Duration {
	p.t.Helper()
	seq := p.eval(`document.getElementById("result").dataset.seq`)
	start := time.Now()
	p.do("submit a request", chromedp.Click(chromedp.CSS("#submit")))
	p.waitJS("the result", fmt.Sprintf(`document.getElementById("result").dataset.seq !== %q`, seq))
	took := time.Since(start)
	if got := p.eval(`document.getElementById("result").dataset.outcome`); got != want {
		p.t.Errorf("a request: outcome %q, want %q: %s", got, want, p.text("#result"))
	}
	return took
}

// resize sets the page's width, as a window or a phone of that width.
func (p *page) resize(width int64) {
	p.t.Helper()
	p.do(fmt.Sprintf("resize to %d px", width), chromedp.EmulateViewport(width, height))
	time.Sleep(300 * time.Millisecond) // a frame of the timeline at the new size
}

// checkLayout checks what a narrow screen breaks first: nothing wider than
// the page, no word split across lines in the badge, the headers, the
// policy or the facts, and each legend icon on the line of its label.
func (p *page) checkLayout(width int) {
	p.t.Helper()
	if w := p.number(`document.documentElement.scrollWidth`); w > float64(width) {
		p.t.Errorf("at %d px the page is %v px wide", width, w)
	}
	split := p.eval(`(() => {
		const split = [];
		for (const el of document.querySelectorAll("#backend, #headers td, #headers th, #current dd, #current dt, .facts dd, #summary, #result")) {
			const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
			for (let node; (node = walker.nextNode());) {
				for (const m of node.textContent.matchAll(/\S+/g)) {
					const r = document.createRange();
					r.setStart(node, m.index);
					r.setEnd(node, m.index + m[0].length);
					const tops = new Set(Array.from(r.getClientRects(), (b) => Math.round(b.top)));
					if (tops.size > 1) split.push(m[0]);
				}
			}
		}
		return split.join(" | ");
	})()`)
	if split != "" {
		p.t.Errorf("at %d px these words break across lines: %s", width, split)
	}
	apart := p.eval(`Array.from(document.querySelectorAll(".legend-item"), (item) => {
		const key = item.querySelector(".key");
		const text = Array.from(item.childNodes).find((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
		const r = document.createRange();
		r.selectNodeContents(text);
		const lines = new Set(Array.from(r.getClientRects(), (b) => Math.round(b.top))).size;
		if (lines > 1) return item.textContent;
		if (!key) return "";
		const k = key.getBoundingClientRect(), tr = r.getBoundingClientRect();
		const apart = Math.abs((k.top + k.bottom) / 2 - (tr.top + tr.bottom) / 2) > 6 || k.right > tr.left + 1 || tr.left - k.right > 12;
		return apart ? item.textContent : "";
	}).filter(Boolean).join(" | ")`)
	if apart != "" {
		p.t.Errorf("at %d px these legend items break: %s", width, apart)
	}
	out := p.eval(`Array.from(document.querySelectorAll(".legend > *"), (item) => {
		const card = item.closest(".card").getBoundingClientRect();
		return item.getBoundingClientRect().right > card.right - 1 ? item.textContent : "";
	}).filter(Boolean).join(" | ")`)
	if out != "" {
		p.t.Errorf("at %d px these legend items pass the card's edge: %s", width, out)
	}
}

// checkLabels checks that the timeline shows each label, and that no two
// print over one another.
func (p *page) checkLabels(want ...string) {
	p.t.Helper()
	var labels []struct {
		Row    int
		X0, X1 float64
		Text   string
	}
	p.waitJS("the timeline's labels", `document.getElementById("timeline").dataset.labels !== undefined`)
	time.Sleep(100 * time.Millisecond) // a frame drawn with the latest marks
	if err := json.Unmarshal([]byte(p.eval(`document.getElementById("timeline").dataset.labels`)), &labels); err != nil {
		p.t.Fatal(err)
	}
	var texts []string
	for i, a := range labels {
		texts = append(texts, a.Text)
		for _, b := range labels[i+1:] {
			if a.Row == b.Row && a.X0 < b.X1 && b.X0 < a.X1 {
				p.t.Errorf("the labels %q and %q overlap: %+v, %+v", a.Text, b.Text, a, b)
			}
		}
	}
	all := " " + strings.Join(texts, " + ") + " "
	for _, w := range want {
		if !strings.Contains(all, " "+w+" ") {
			p.t.Errorf("the timeline's labels %q lack %q", texts, w)
		}
	}
}

// checkRequests checks that the timeline draws one mark per request.
func (p *page) checkRequests(allowed, denied int) {
	p.t.Helper()
	time.Sleep(100 * time.Millisecond) // a frame drawn with the latest requests
	var shown struct {
		Allowed, Denied int
		Groups          []int
	}
	if err := json.Unmarshal([]byte(p.eval(`document.getElementById("timeline").dataset.requests`)), &shown); err != nil {
		p.t.Fatal(err)
	}
	if shown.Allowed != allowed || shown.Denied != denied {
		p.t.Errorf("the timeline shows %d allowed and %d denied of %d and %d", shown.Allowed, shown.Denied, allowed, denied)
	}
	if len(shown.Groups) == 0 {
		p.t.Errorf("no group of requests is counted on the timeline: %+v", shown)
	}
}

// save writes a screenshot of the whole page to the screenshots directory.
func (p *page) save(name string) {
	p.t.Helper()
	path := filepath.Join(p.shots, name)
	if err := os.WriteFile(path, p.screenshot(), 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("saved %s", path)
}

// savePicture writes the README's picture of the page to path, with the
// badge showing pictureAddr in place of the test's Redis. The page keeps
// polling, so the badge is rewritten as often as the page sets it.
func (p *page) savePicture(path, redisAddr string) {
	p.t.Helper()
	if redisAddr != "" {
		p.do("show "+pictureAddr+" on the badge", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
			const badge = document.getElementById("backend");
			const fix = () => { if (badge.textContent.includes(%[1]q)) badge.textContent = badge.textContent.replace(%[1]q, %[2]q); };
			new MutationObserver(fix).observe(badge, { childList: true, characterData: true, subtree: true });
			fix();
		})()`, redisAddr, pictureAddr)))
		time.Sleep(300 * time.Millisecond)
		if badge := p.text("#backend"); strings.Contains(badge, redisAddr) {
			p.t.Fatalf("the badge still shows %s: %q", redisAddr, badge)
		}
	}
	if err := os.WriteFile(path, p.screenshot(), 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("saved the README's picture to %s", path)
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
		chromedp.WindowSize(wide, height),
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

// shotsDir returns where t saves its screenshots: $RATEKEEPER_E2E_SCREENSHOTS,
// or a temporary directory removed after the test. Never docs/: the
// README's picture changes only with `make screenshot`.
func shotsDir(t *testing.T) string {
	dir := os.Getenv(envShots)
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	buildOnce sync.Once
	binDir    string // the binary's directory, if demoBinary built it
	binPath   string
	binErr    error
)

// demoBinary builds the demo server once for every test, unless make test
// built it for the whole run (prebuilt.DemoRaceEnv; see
// internal/prebuilt).
func demoBinary(t *testing.T) string {
	buildOnce.Do(func() {
		if p, _, err := prebuilt.Demo(true); p != "" || err != nil {
			binPath, binErr = p, err
			return
		}
		binDir, binErr = os.MkdirTemp("", "ratekeeper-e2e-")
		if binErr != nil {
			return
		}
		build, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// With the race detector: the browser's requests are the
		// concurrency that the server tests cannot make up.
		binPath = filepath.Join(binDir, "ratekeeper-demo")
		cmd := exec.CommandContext(build, "go", "build", "-race", "-o", binPath, "./cmd/ratekeeper-demo")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/ratekeeper-demo: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestMain removes the demo's binary, and says how many tests skipped for
// want of Redis.
func TestMain(m *testing.M) {
	code := redistest.Run(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// startDemo runs the demo server on a free loopback port, with the Redis
// at redisAddr or else the in-process store, and stops it when t ends. It
// returns the server's URL and its log.
func startDemo(t *testing.T, redisAddr string) (string, *testutil.SyncBuffer) {
	bin := demoBinary(t)
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
	if redisAddr != "" {
		env = append(env, "REDIS_URL=redis://"+redisAddr)
	}
	logs := new(testutil.SyncBuffer)
	server := exec.Command(bin, "-addr", addr)
	server.Env = env
	server.Stdout, server.Stderr = logs, logs
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
		// One format: slog's, go-redis's lines included.
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(line, "time=") {
				t.Errorf("a log line not in slog's format: %q", line)
			}
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("demo server log:\n%s", out)
		}
	})

	url := "http://" + addr
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := client.Get(url + "/state")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, logs
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

// checkFormFromTable checks that the policy form is the server's table of
// algorithms (GET /algorithms), not a copy of its own: every algorithm in
// the select, and each field with its label, hint, default and range,
// such as the sliding window log's smaller limit that only the table sets.
func checkFormFromTable(t *testing.T, page *page, base string) {
	t.Helper()
	resp, err := http.Get(base + "/algorithms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type field struct {
		Name    string  `json:"name"`
		Label   string  `json:"label"`
		Hint    string  `json:"hint"`
		Max     float64 `json:"max"`
		Default float64 `json:"default"`
	}
	type algorithm struct {
		Name   string  `json:"name"`
		Label  string  `json:"label"`
		Short  string  `json:"short"`
		Fields []field `json:"fields"`
	}
	var table []algorithm
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		t.Fatalf("GET /algorithms: %v", err)
	}
	if len(table) == 0 {
		t.Fatal("GET /algorithms lists no algorithm")
	}
	// The page's form, read back in the table's shape.
	var form []algorithm
	raw := page.eval(`JSON.stringify([...document.querySelectorAll("#algorithm option")].map((o) => ({
		name: o.value, label: o.textContent,
		fields: [...document.querySelectorAll('fieldset[data-algorithm="' + o.value + '"] input')].map((i) => ({
			id: i.id, name: i.name,
			label: document.querySelector('label[for="' + i.id + '"]').firstChild.textContent.trim(),
			hint: document.querySelector('label[for="' + i.id + '"] small').textContent,
			max: Number(i.max), default: Number(i.value),
		})),
	})))`)
	if err := json.Unmarshal([]byte(raw), &form); err != nil {
		t.Fatalf("reading the form %s: %v", raw, err)
	}
	for i := range table {
		table[i].Short = "" // an id prefix, not shown
	}
	if got, want := fmt.Sprintf("%+v", form), fmt.Sprintf("%+v", table); got != want {
		t.Errorf("the form is\n%s\nthe table is\n%s", got, want)
	}
	if page.eval(`document.getElementById("swl-limit").max`) == page.eval(`document.getElementById("fw-limit").max`) {
		t.Error("the sliding window log's limit has the fixed window's range: the form is not the table")
	}
}
