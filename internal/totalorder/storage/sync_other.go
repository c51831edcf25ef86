//go:build !linux

package storage

import "os"

// fdatasync flushes f's data.
func fdatasync(f *os.File) error { return f.Sync() }
