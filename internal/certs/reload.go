package certs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// watched is what a set of files loads to, kept current: reload reads the
// files again and, if they changed and load whole, makes the new value
// current; otherwise the previous one stays. Readers call get at every
// handshake, so a reload applies to new connections at once.
type watched[T any] struct {
	what  string // for errors: "peer TLS", "client TLS"
	paths []string
	load  func(raw [][]byte) (T, error)
	cur   atomic.Pointer[loaded[T]]

	mu  sync.Mutex // serializes reloads; guards bad
	bad [sha256.Size]byte
}

type loaded[T any] struct {
	raw [][]byte // the files as read
	v   T
}

// init reads and loads the files the first time.
func (w *watched[T]) init() error {
	raw, err := w.read()
	if err != nil {
		return err
	}
	v, err := w.load(raw)
	if err != nil {
		return err
	}
	w.cur.Store(&loaded[T]{raw: raw, v: v})
	return nil
}

func (w *watched[T]) get() T { return w.cur.Load().v }

// reload reads the files again and makes what they load current if they
// changed; fresh reports an error about file contents that have not failed
// before (watch logs each failure once, not at every tick).
func (w *watched[T]) reload() (changed, fresh bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	raw, err := w.read()
	if err != nil {
		return false, w.failed([]byte(err.Error())), err
	}
	if slices.EqualFunc(raw, w.cur.Load().raw, bytes.Equal) {
		return false, false, nil
	}
	v, err := w.load(raw)
	if err != nil {
		return false, w.failed(raw...), err
	}
	w.cur.Store(&loaded[T]{raw: raw, v: v})
	w.bad = [sha256.Size]byte{}
	return true, false, nil
}

// failed records what failed to load and reports whether it differs from
// the last failure.
func (w *watched[T]) failed(what ...[]byte) bool {
	h := sha256.New()
	for _, b := range what {
		h.Write(b)
		h.Write([]byte{0})
	}
	var sum [sha256.Size]byte
	copy(sum[:], h.Sum(nil))
	fresh := sum != w.bad
	w.bad = sum
	return fresh
}

func (w *watched[T]) read() ([][]byte, error) {
	raw := make([][]byte, len(w.paths))
	for i, path := range w.paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("certs: %s: %w", w.what, err)
		}
		raw[i] = b
	}
	return raw, nil
}

// watch reloads every interval until ctx ends, calling changed after each
// change and failed after each new failure.
func (w *watched[T]) watch(ctx context.Context, every time.Duration, changed func(), failed func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ch, fresh, err := w.reload()
		switch {
		case ch:
			changed()
		case err != nil && fresh:
			failed(err)
		}
	}
}
