package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// wait bounds every wait for a reload: far above the debounce, and below
// the poll, which the tests set longer, so that only events can be seen.
const wait = 3 * time.Second

// watching runs Watch on path until the test ends.
type watching struct {
	loads chan *Config
	errs  chan error
}

func startWatch(t *testing.T, path string) *watching {
	t.Helper()
	old := poll
	poll = time.Hour
	w := &watching{loads: make(chan *Config, 100), errs: make(chan error, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, path, func(c *Config) { w.loads <- c }, func(err error) { w.errs <- err })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Watch: %v", err)
			}
		case <-time.After(wait):
			t.Error("Watch did not return when its context ended")
		}
		poll = old
	})
	time.Sleep(50 * time.Millisecond) // let it set its watches up
	return w
}

// load waits for a successful reload.
func (w *watching) load(t *testing.T) *Config {
	t.Helper()
	select {
	case c := <-w.loads:
		return c
	case err := <-w.errs:
		t.Fatalf("reload failed: %v", err)
	case <-time.After(wait):
		t.Fatal("no reload")
	}
	return nil
}

// fail waits for a failed reload.
func (w *watching) fail(t *testing.T) error {
	t.Helper()
	select {
	case c := <-w.loads:
		t.Fatalf("reloaded %v, want an error", c.Domains())
	case err := <-w.errs:
		return err
	case <-time.After(wait):
		t.Fatal("no reload")
	}
	return nil
}

// quiet checks that nothing is reported for a while.
func (w *watching) quiet(t *testing.T) {
	t.Helper()
	select {
	case c := <-w.loads:
		t.Fatalf("reloaded %v", c.Domains())
	case err := <-w.errs:
		t.Fatalf("reload failed: %v", err)
	case <-time.After(10 * debounce):
	}
}

// domainYAML is a file of domain d, whose rule allows rpu per minute.
func domainYAML(d string, rpu int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", d, rpu)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rpu is the limit the configuration gives domain d's key k.
func rpu(t *testing.T, c *Config, d string) uint32 {
	t.Helper()
	r := c.Lookup(d, []Entry{{"k", "v"}})
	if r == nil {
		t.Fatalf("no rule for %s in %v", d, c.Domains())
	}
	return r.Limits[0].RequestsPerUnit
}

func TestWatchFileRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write(t, path, domainYAML("d", 1))
	w := startWatch(t, path)
	write(t, path, domainYAML("d", 2))
	if got := rpu(t, w.load(t), "d"); got != 2 {
		t.Errorf("rpu %d, want 2", got)
	}
	write(t, path, domainYAML("d", 2)) // the same again: no reload
	w.quiet(t)
}

func TestWatchRenameOver(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	write(t, path, domainYAML("d", 1))
	w := startWatch(t, path)
	// An editor's save: write a new file beside it, rename it over.
	tmp := filepath.Join(dir, ".config.yaml.swp")
	write(t, tmp, domainYAML("d", 3))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := rpu(t, w.load(t), "d"); got != 3 {
		t.Errorf("rpu %d, want 3", got)
	}
	// Once more: the watch outlives the file it first saw.
	write(t, tmp, domainYAML("d", 4))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := rpu(t, w.load(t), "d"); got != 4 {
		t.Errorf("rpu %d, want 4", got)
	}
}

// configMap lays out a directory as the kubelet does a ConfigMap volume:
// each key a symlink through ..data to a timestamped directory.
type configMap struct {
	dir     string
	version int
}

func newConfigMap(t *testing.T, files map[string]string) *configMap {
	m := &configMap{dir: t.TempDir()}
	m.update(t, files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(m.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// update writes a new version and swaps ..data to it atomically, as the
// kubelet does.
func (m *configMap) update(t *testing.T, files map[string]string) {
	t.Helper()
	m.version++
	old := fmt.Sprintf("..2026_01_01_00_00_%02d", m.version-1)
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d", m.version)
	if err := os.Mkdir(filepath.Join(m.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		write(t, filepath.Join(m.dir, ts, name), content)
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(m.dir, old))
}

func TestWatchConfigMapDirectory(t *testing.T) {
	m := newConfigMap(t, map[string]string{"config.yaml": domainYAML("d", 1)})
	c, err := Load(m.dir)
	if err != nil || rpu(t, c, "d") != 1 {
		t.Fatalf("Load: %v", err)
	}
	w := startWatch(t, m.dir)
	m.update(t, map[string]string{"config.yaml": domainYAML("d", 5)})
	if got := rpu(t, w.load(t), "d"); got != 5 {
		t.Errorf("rpu %d, want 5", got)
	}
	m.update(t, map[string]string{"config.yaml": domainYAML("d", 6)})
	if got := rpu(t, w.load(t), "d"); got != 6 {
		t.Errorf("rpu %d, want 6", got)
	}
}

func TestWatchConfigMapFile(t *testing.T) {
	m := newConfigMap(t, map[string]string{"config.yaml": domainYAML("d", 1)})
	w := startWatch(t, filepath.Join(m.dir, "config.yaml"))
	m.update(t, map[string]string{"config.yaml": domainYAML("d", 7)})
	if got := rpu(t, w.load(t), "d"); got != 7 {
		t.Errorf("rpu %d, want 7", got)
	}
}

func TestWatchInvalidThenValid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write(t, path, domainYAML("d", 1))
	w := startWatch(t, path)
	write(t, path, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	err := w.fail(t)
	var e *Error
	if !errors.As(err, &e) || e.Line != 4 || e.Field != "descriptors[0].rate_limit.unit" {
		t.Errorf("error %v, want one at line 4, descriptors[0].rate_limit.unit", err)
	}
	write(t, path, domainYAML("d", 8))
	if got := rpu(t, w.load(t), "d"); got != 8 {
		t.Errorf("rpu %d, want 8", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.fail(t)
	write(t, path, domainYAML("d", 9))
	if got := rpu(t, w.load(t), "d"); got != 9 {
		t.Errorf("rpu %d, want 9", got)
	}
}

func TestWatchDirectoryFilesAddedRemoved(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 1))
	w := startWatch(t, dir)
	write(t, filepath.Join(dir, "b.yml"), domainYAML("b", 2))
	c := w.load(t)
	if got := c.Domains(); len(got) != 2 || rpu(t, c, "b") != 2 {
		t.Errorf("domains %v", got)
	}
	write(t, filepath.Join(dir, "notes.txt"), "not configuration")
	w.quiet(t)
	if err := os.Remove(filepath.Join(dir, "b.yml")); err != nil {
		t.Fatal(err)
	}
	if got := w.load(t).Domains(); len(got) != 1 || got[0] != "a" {
		t.Errorf("domains %v, want [a]", got)
	}
}

func TestWatchDebounces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	write(t, path, domainYAML("d", 1))
	w := startWatch(t, path)
	const writes = 20
	for i := range writes {
		write(t, path, domainYAML("d", 100+i))
	}
	// The burst ends in the last version, in fewer reloads than writes.
	var c *Config
	loads := 0
	for c == nil || rpu(t, c, "d") != 100+writes-1 {
		c = w.load(t)
		loads++
	}
	if loads >= writes {
		t.Errorf("%d reloads for %d writes", loads, writes)
	}
	t.Logf("%d writes, %d reloads", writes, loads)
}

func TestWatchDirectoryRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 1))
	w := startWatch(t, dir)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	w.fail(t)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 2))
	// The directory's creation may be seen before its file: an error, then
	// the configuration.
	deadline := time.After(wait)
	for loaded := false; !loaded; {
		select {
		case c := <-w.loads:
			loaded = rpu(t, c, "a") == 2
		case <-w.errs:
		case <-deadline:
			t.Fatal("no reload")
		}
	}
	// The new directory is watched: a change inside it is seen.
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 3))
	if got := rpu(t, w.load(t), "a"); got != 3 {
		t.Errorf("rpu %d, want 3", got)
	}
}
