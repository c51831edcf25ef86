package admin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// AddrFileName is the file, in the node's data directory, that holds the
// address its admin API listens on ("host:port\n"), written at every start
// and removed at a clean stop: with the default admin_listen the port is
// chosen at start, and `ordoctl --data-dir DIR` reads it from there.
const AddrFileName = "admin.addr"

// WriteAddrFile records addr in dataDir/admin.addr (written whole under a
// temporary name, then renamed over the previous one).
func WriteAddrFile(dataDir, addr string) error {
	path := filepath.Join(dataDir, AddrFileName)
	tmp, err := os.CreateTemp(dataDir, ".admin-addr-*")
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o644)
	if err == nil {
		_, err = tmp.WriteString(addr + "\n")
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("admin: write %s: %w", path, err)
	}
	return nil
}

// RemoveAddrFile removes dataDir/admin.addr if it still names addr.
func RemoveAddrFile(dataDir, addr string) {
	path := filepath.Join(dataDir, AddrFileName)
	if b, err := os.ReadFile(path); err == nil && string(bytes.TrimSpace(b)) == addr {
		_ = os.Remove(path)
	}
}

// ReadAddrFile returns the admin address recorded in dataDir.
func ReadAddrFile(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, AddrFileName))
	if err != nil {
		return "", err
	}
	addr := string(bytes.TrimSpace(b))
	if addr == "" {
		return "", fmt.Errorf("admin: %s is empty", filepath.Join(dataDir, AddrFileName))
	}
	return addr, nil
}
