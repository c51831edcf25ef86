//go:build !linux

package storage

import "os"

// fdatasync flushes f's data.
func fdatasync(f *os.File) error { return f.Sync() }

// preallocate is a no-op where fallocate is not available.
func preallocate(f *os.File, size int64) error { return nil }
