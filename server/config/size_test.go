package config

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLargePlainFile: a file of 100,000 descriptors without aliases (over
// a million nodes) is read whole.
func TestLargePlainFile(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 descriptors: skipped with -short")
	}
	var b strings.Builder
	b.WriteString("domain: big\ndescriptors:\n")
	const n = 100_000
	for i := range n {
		fmt.Fprintf(&b, "  - key: user\n    value: u%d\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5\n", i)
	}
	c, errs := loadYAML(t, b.String())
	if errs != nil {
		t.Fatalf("%d errors, the first %s", len(errs), errs[0])
	}
	if got := len(c.Rules("big")); got != n {
		t.Errorf("%d rules, want %d", got, n)
	}
}

// TestOneErrorPastTheBudget: once aliases have added more nodes than the
// walk takes, the file gets that one error, which blames them, and no
// other about what was left unread (the descriptors after them).
func TestOneErrorPastTheBudget(t *testing.T) {
	// In the first descriptor, under an ignored key whose value envoy's
	// loader still checks; the descriptors after it are never read.
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: bomb\n    unit:\n")
	b.WriteString(aliasBomb("      "))
	for i := range 1000 {
		fmt.Fprintf(&b, "  - key: k%d\n    value: v\n    rate_limit: {unit: hour, requests_per_unit: 5}\n", i)
	}
	_, errs := loadYAML(t, b.String())
	if len(errs) != 1 || !strings.Contains(errs[0], "aliases") {
		t.Fatalf("%d errors, want one that blames the aliases:\n%.2000s", len(errs), strings.Join(errs, "\n"))
	}
}

// TestDepthBounded: descriptors nested past maxDepth get one clear error,
// and a file of thousands of levels costs memory in proportion to its
// size, not to its depth squared.
func TestDepthBounded(t *testing.T) {
	nested := func(levels int) string {
		s := "[{key: last, rate_limit: {unit: hour, requests_per_unit: 5}}]"
		for i := range levels - 1 {
			s = fmt.Sprintf("[{key: k%d, descriptors: %s}]", i, s)
		}
		return "domain: deep\ndescriptors: " + s + "\n"
	}
	if _, errs := loadYAML(t, nested(maxDepth)); errs != nil {
		t.Errorf("%d levels: %v", maxDepth, errs)
	}
	_, errs := loadYAML(t, nested(maxDepth+1))
	if len(errs) != 1 || !strings.Contains(errs[0], fmt.Sprintf("more than %d levels deep", maxDepth)) {
		t.Errorf("%d levels: %v, want one error saying how deep descriptors may nest", maxDepth+1, errs)
	}
	text := nested(4_990)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, errs = loadYAML(t, text)
	runtime.ReadMemStats(&after)
	if len(errs) != 1 {
		t.Errorf("4,990 levels: %d errors, want 1", len(errs))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 200*uint64(len(text)) {
		t.Errorf("4,990 levels, %d bytes: %d MB allocated, over 200 times the file's size", len(text), alloc>>20)
	}
}

// TestOnlyRegularFiles: a named pipe among the files is refused at once,
// with an error naming it, rather than blocking the reader until someone
// writes to it; and the watcher goes on.
func TestOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 1))
	pipe := filepath.Join(dir, "pipe.yaml")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Skip("no named pipes here:", err)
	}
	// Should the reader block, a writer lets it go at the end.
	t.Cleanup(func() {
		if f, err := os.OpenFile(pipe, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	done := make(chan error, 1)
	go func() { _, err := Load(dir); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "pipe.yaml") || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Load of a directory with a named pipe: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load blocked on a named pipe")
	}
	if err := os.Remove(pipe); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, dir)
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.fail(t); !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("reload with a named pipe: %v", err)
	}
	if err := os.Remove(pipe); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), domainYAML("a", 7))
	if got := rpu(t, w.load(t), "a"); got != 7 {
		t.Errorf("rpu %d after the pipe left, want 7", got)
	}
}

// TestFileSizeBounded: a file over maxFileSize is refused unread.
func TestFileSizeBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxFileSize + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load of a file over %d bytes: %v", maxFileSize, err)
	}
}

// aliasBomb is a mapping, each line indented by indent, whose every level
// names the previous one 15 times: 15^6 nodes once expanded, all of them
// keys envoy's loader knows.
func aliasBomb(indent string) string {
	var b strings.Builder
	keys := []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
		"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold"}
	b.WriteString(indent + keys[0] + ": &l0 {unit: x}\n")
	for level := 1; level <= 6; level++ {
		fmt.Fprintf(&b, "%s%s: &l%d {", indent, keys[level], level)
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s: *l%d", k, level-1)
		}
		b.WriteString("}\n")
	}
	return b.String()
}
