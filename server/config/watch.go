package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce is how long Watch waits after the last event of a burst before
// it reloads: an editor's save or a ConfigMap's update is several events.
const debounce = 100 * time.Millisecond

// poll is how often Watch also reads the files, in case an event was
// missed (a watched directory replaced as a whole, a network file system).
// Tests set it longer, to see that events alone suffice.
var poll = 5 * time.Second

// Watch reloads path when it changes (including a ConfigMap's ..data
// symlink swap, editors' rename-over-write, files added/removed in the
// directory), calling onLoad with each new successfully loaded Config, and
// onError for each failed reload (the caller keeps serving the old config).
// It returns when ctx ends, with nil, or at once with an error if it cannot
// watch at all. Debounce bursts of events (~100 ms).
//
// onLoad and onError are called one at a time, from the goroutine that
// runs Watch. The configuration as it is when Watch starts is the
// baseline: Watch
// reports changes from it, and calls neither function for files that
// change back to what was last reported.
func Watch(ctx context.Context, path string, onLoad func(*Config), onError func(error)) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fw.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	w := &watcher{fw: fw, path: abs}
	w.rewatch()
	_, last, _ := read(path)

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	reload := func() {
		w.rewatch()
		files, sum, err := read(path)
		if sum == last {
			return
		}
		last = sum
		if err == nil {
			var c *Config
			if c, err = build(files); err == nil {
				onLoad(c)
				return
			}
		}
		onError(err)
	}
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			if w.relevant(ev) {
				timer.Reset(debounce)
			}
		case _, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			timer.Reset(debounce) // events may be lost: look
		case <-timer.C:
			reload()
		case <-ticker.C:
			reload()
		}
	}
}

// read reads path's files, and returns the fingerprint of what it read:
// of the error when it failed.
func read(path string) ([]file, [32]byte, error) {
	files, err := readFiles(path)
	if err != nil {
		return nil, fingerprint([]file{{name: err.Error()}}), err
	}
	return files, fingerprint(files), nil
}

// watcher keeps the directories that hold path's files watched.
type watcher struct {
	fw   *fsnotify.Watcher
	path string
	// targets are the files path's symlinks lead to.
	targets map[string]bool
}

// rewatch watches the directories where a change to path shows: its
// parent (a swap of path itself, or of ..data beside a file), path when it
// is a directory, and the directories its symlinks lead to. Directories
// that no longer matter are dropped.
func (w *watcher) rewatch() {
	want := map[string]bool{filepath.Dir(w.path): true}
	w.targets = map[string]bool{}
	add := func(p string) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			want[filepath.Dir(real)] = true
			w.targets[real] = true
		}
	}
	if info, err := os.Stat(w.path); err == nil && info.IsDir() {
		want[w.path] = true
		if real, err := filepath.EvalSymlinks(w.path); err == nil {
			want[real] = true
		}
		entries, _ := os.ReadDir(w.path)
		for _, e := range entries {
			if name := e.Name(); e.Type()&os.ModeSymlink != 0 && !strings.HasPrefix(name, ".") {
				add(filepath.Join(w.path, name))
			}
		}
	} else if err == nil {
		add(w.path)
	}
	// The watcher's own list, not ours: it drops a directory that was
	// deleted, which must be watched again once it is back.
	watched := map[string]bool{}
	for _, d := range w.fw.WatchList() {
		watched[d] = true
		if !want[d] {
			_ = w.fw.Remove(d)
		}
	}
	for d := range want {
		if !watched[d] {
			_ = w.fw.Add(d) // a directory missing now is tried again at the next reload
		}
	}
}

// relevant reports whether an event may change the configuration: in the
// parent of path, only events on path itself, on the ..data-like names of
// a ConfigMap and on the files path's symlinks lead to; anywhere else, any.
func (w *watcher) relevant(ev fsnotify.Event) bool {
	if filepath.Dir(ev.Name) != filepath.Dir(w.path) || w.targets[ev.Name] {
		return true
	}
	base := filepath.Base(ev.Name)
	return base == filepath.Base(w.path) || strings.HasPrefix(base, "..")
}
