package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/prebuilt"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

const (
	envLoadDurationName = "RATEKEEPER_SOAK_LOAD_DURATION"
	loadWorkers         = 128
	// rssInterval is how often the server's resident memory is sampled.
	rssInterval = 500 * time.Millisecond
	// stopTimeout is how long the server may take to exit on SIGTERM.
	stopTimeout = 5 * time.Second
)

// demoConfigs are the policies the load cycles through while it runs, one
// of each algorithm, each admitting a few hundred requests a second, so
// that answers mix 200 and 429 and the server keeps building limiters.
var demoConfigs = []string{
	`{"algorithm":"token_bucket","capacity":50,"refill_rate":50,"refill_interval":0.1}`,
	`{"algorithm":"gcra","rate":500,"period":1,"burst":50}`,
	`{"algorithm":"fixed_window","limit":50,"window":0.1}`,
	`{"algorithm":"sliding_window_log","limit":50,"window":0.1}`,
	`{"algorithm":"sliding_window_counter","limit":50,"window":0.1}`,
	`{"algorithm":"leaky_bucket","capacity":50,"leak_rate":500}`,
}

// TestDemoLoad runs the demo server against the test Redis under sustained
// load: no answer may be a server error or fail in transport, its memory
// must level off, and it must stop cleanly on SIGTERM.
func TestDemoLoad(t *testing.T) {
	redisAddr := redistest.Addr(t)
	dur := envDuration(t, envLoadDurationName, 3*time.Second)
	d := startDemo(t, builtDemo(t), redisAddr)

	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = loadWorkers + 1
	tr.MaxIdleConnsPerHost = loadWorkers + 1
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()

	// Every worker keeps its own tallies, merged at the end.
	type worker struct {
		status   map[string]int64 // "POST /test 429": count
		errors   int64
		firstErr error
	}
	do := func(w *worker, method, path, body string) {
		req, err := http.NewRequest(method, d.url+path, strings.NewReader(body))
		if err == nil {
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			var resp *http.Response
			if resp, err = client.Do(req); err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil {
					w.status[fmt.Sprintf("%s %s %d", method, path, resp.StatusCode)]++
					return
				}
			}
		}
		w.errors++
		if w.firstErr == nil {
			w.firstErr = err
		}
	}

	workers := make([]worker, loadWorkers+1) // the last one changes the policy
	for i := range workers {
		workers[i].status = make(map[string]int64)
	}
	var wg sync.WaitGroup
	stopRSS := make(chan struct{})
	rssDone := make(chan []rssSample)
	start := time.Now()
	go func() { rssDone <- sampleRSS(d.cmd.Process.Pid, start, stopRSS) }()
	for i := range loadWorkers {
		wg.Go(func() {
			// Mostly decisions; one request in ten peeks.
			for n := 0; time.Since(start) < dur; n++ {
				if n%10 == 9 {
					do(&workers[i], http.MethodGet, "/state", "")
				} else {
					do(&workers[i], http.MethodPost, "/test", "")
				}
			}
		})
	}
	wg.Go(func() {
		for n := 0; time.Since(start) < dur; n++ {
			do(&workers[loadWorkers], http.MethodPost, "/config", demoConfigs[n%len(demoConfigs)])
			time.Sleep(min(250*time.Millisecond, dur-time.Since(start)))
		}
	})
	wg.Wait()
	elapsed := time.Since(start)
	close(stopRSS)
	samples := <-rssDone

	status := make(map[string]int64)
	var requests, serverErrors, transportErrors int64
	var firstErr error
	for _, w := range workers {
		for k, n := range w.status {
			status[k] += n
			requests += n
			if code, _ := strconv.Atoi(k[strings.LastIndexByte(k, ' ')+1:]); code >= 500 {
				serverErrors += n
			}
		}
		transportErrors += w.errors
		if firstErr == nil {
			firstErr = w.firstErr
		}
	}
	requests += transportErrors
	keys := slices.Sorted(maps.Keys(status))
	var counts []string
	for _, k := range keys {
		counts = append(counts, fmt.Sprintf("%s: %d", k, status[k]))
	}
	t.Logf("%d requests from %d workers in %v: %.0f/s; %s", requests, loadWorkers, elapsed.Round(time.Millisecond),
		float64(requests)/elapsed.Seconds(), strings.Join(counts, ", "))
	if serverErrors > 0 {
		t.Errorf("%d answers were server errors (5xx)", serverErrors)
	}
	if transportErrors > 0 {
		t.Errorf("%d requests failed in transport; the first: %v", transportErrors, firstErr)
	}
	if status["POST /test 200"] == 0 || status["POST /test 429"] == 0 {
		t.Errorf("POST /test answered %d 200s and %d 429s: want both", status["POST /test 200"], status["POST /test 429"])
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "POST /config ") && k != "POST /config 200" {
			t.Errorf("%d policy changes answered %s", status[k], strings.TrimPrefix(k, "POST /config "))
		}
	}
	checkRSS(t, samples, dur)

	tr.CloseIdleConnections()
	d.stop(t)
}

// rssSample is the server's resident memory at some time into the load.
type rssSample struct {
	at  time.Duration
	rss int64 // bytes
}

// sampleRSS reads the resident memory of process pid every rssInterval
// until stop is closed. It samples nothing where /proc is missing.
func sampleRSS(pid int, start time.Time, stop <-chan struct{}) []rssSample {
	var samples []rssSample
	tick := time.NewTicker(rssInterval)
	defer tick.Stop()
	for {
		if rss, err := readRSS(pid); err == nil {
			samples = append(samples, rssSample{time.Since(start), rss})
		}
		select {
		case <-stop:
			return samples
		case <-tick.C:
		}
	}
}

// readRSS returns VmRSS from /proc/pid/status, in bytes.
func readRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) != 2 || f[1] != "kB" {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// checkRSS asserts that memory levels off. The rule: the largest RSS of
// the second half of the run is at most 1.5 times the largest of the
// first half, plus 16 MiB. By the middle of the run the server has seen
// every kind of request many times over, so its working set is reached;
// a leak keeps growing with the requests, while the margin absorbs the
// garbage collector letting the heap grow up to twice the live data, and
// the allocator's noise.
func checkRSS(t *testing.T, samples []rssSample, dur time.Duration) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Logf("memory not checked: no /proc on %s", runtime.GOOS)
		return
	}
	var first, second, low int64
	var all []string
	for _, s := range samples {
		if s.at < dur/2 {
			first = max(first, s.rss)
		} else {
			second = max(second, s.rss)
		}
		if low == 0 || s.rss < low {
			low = s.rss
		}
		all = append(all, fmt.Sprintf("%.1f", mib(s.rss)))
	}
	if first == 0 || second == 0 {
		t.Errorf("%d memory samples: too few to compare the two halves of the run", len(samples))
		return
	}
	limit := first*3/2 + 16<<20
	t.Logf("RSS: %d samples every %v; min %.1f MiB, first half max %.1f MiB, second half max %.1f MiB (limit %.1f MiB), last %.1f MiB",
		len(samples), rssInterval, mib(low), mib(first), mib(second), mib(limit), mib(samples[len(samples)-1].rss))
	t.Logf("RSS samples (MiB): %s", strings.Join(all, " "))
	if second > limit {
		t.Errorf("memory grew: RSS reached %.1f MiB in the second half of the run, over 1.5 × %.1f MiB + 16 MiB", mib(second), mib(first))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// TestMain builds the demo while the accuracy test runs, when there is a
// Redis to run the tests against.
func TestMain(m *testing.M) {
	if os.Getenv(redistest.EnvAddr) != "" {
		startDemoBuild()
	}
	code := redistest.Run(m)
	if demoBuild.done != nil {
		<-demoBuild.done
		os.RemoveAll(demoBuild.dir)
	}
	os.Exit(code)
}

// demoBuild is the demo's binary, built in the background. Never with the
// race detector, even when the test has it: its shadow memory would swamp
// the RSS that the load test watches, and grows as the server touches new
// memory.
var demoBuild struct {
	done chan struct{} // closed when the build is over; nil if not started
	dir  string        // removed after the tests
	bin  string
	err  error
}

// startDemoBuild starts the build, unless make test built the demo for
// the whole run (prebuilt.DemoEnv; see internal/prebuilt).
func startDemoBuild() {
	demoBuild.done = make(chan struct{})
	if p, _, err := prebuilt.Demo(false); p != "" || err != nil {
		demoBuild.bin, demoBuild.err = p, err
		close(demoBuild.done)
		return
	}
	dir, err := os.MkdirTemp("", "ratekeeper-soak-")
	if err != nil {
		demoBuild.err = err
		close(demoBuild.done)
		return
	}
	demoBuild.dir = dir
	go func() {
		defer close(demoBuild.done)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		bin := filepath.Join(dir, "ratekeeper-demo")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ratekeeper-demo")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			demoBuild.err = fmt.Errorf("go build ./cmd/ratekeeper-demo: %v\n%s", err, out)
			return
		}
		demoBuild.bin = bin
	}()
}

// builtDemo waits for the demo's binary and returns its path.
func builtDemo(t *testing.T) string {
	t.Helper()
	<-demoBuild.done
	if demoBuild.err != nil {
		t.Fatal(demoBuild.err)
	}
	return demoBuild.bin
}

// demo is a running demo server.
type demo struct {
	url    string
	cmd    *exec.Cmd
	exited chan error // receives Wait's error once
	reaped bool       // exited has been received from
	logs   *testutil.SyncBuffer
}

// startDemo starts the demo server on a free loopback port, its limits in
// the Redis at redisAddr, and waits until it answers. It kills the server
// when the test ends, if it is still running.
func startDemo(t *testing.T, bin, redisAddr string) *demo {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") && !strings.HasPrefix(kv, "PORT=") {
			env = append(env, kv)
		}
	}
	d := &demo{url: "http://" + addr, exited: make(chan error, 1), logs: new(testutil.SyncBuffer)}
	d.cmd = exec.Command(bin, "-addr", addr)
	d.cmd.Env = append(env, "REDIS_URL=redis://"+redisAddr)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if !d.reaped && d.cmd.Process.Kill() == nil {
			<-d.exited
		}
		out := d.logs.String()
		for _, bad := range []string{"DATA RACE", "panic:"} {
			if strings.Contains(out, bad) {
				t.Errorf("the demo server's log has %q", bad)
			}
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("demo server log:\n%s", out)
		}
	})

	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(15 * time.Second); ; {
		var state struct {
			Backend string `json:"backend"`
		}
		resp, err := client.Get(d.url + "/state")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&state)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				if state.Backend != "redis" {
					t.Fatalf("the demo server keeps its limits in %q, not in Redis", state.Backend)
				}
				return d
			}
			if err == nil {
				err = errors.New(resp.Status)
			}
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			t.Fatalf("the demo server exited: %v\n%s", err, d.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo server did not answer at %s within 15 s: %v", d.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM, as a service manager would, and expects a clean exit
// within stopTimeout.
func (d *demo) stop(t *testing.T) {
	t.Helper()
	sent := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-d.exited:
		d.reaped = true
		if err != nil {
			t.Errorf("the demo server exited with %v on SIGTERM", err)
		} else {
			t.Logf("the demo server exited cleanly %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
		}
	case <-time.After(stopTimeout):
		t.Errorf("the demo server did not exit within %v of SIGTERM", stopTimeout)
	}
}
