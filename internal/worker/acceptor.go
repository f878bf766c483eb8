package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// acceptorFile is the name of the file in the data dir that keeps this
// machine's acceptor id across restarts, so that a restarted worker can renew
// the claims it held.
const acceptorFile = "acceptor-id"

// LoadAcceptorID returns the acceptor id saved in dataDir, generating and
// saving "worker-<hostname>-<random>" (mode 0600) the first time.
func LoadAcceptorID(dataDir string) (string, error) {
	return LoadAcceptorIDAs(dataDir, "worker")
}

// LoadAcceptorIDAs is LoadAcceptorID for an acceptor of another kind: a
// new id starts with kind ("orchestrator-<hostname>-<random>"); an id
// already saved is kept whatever it starts with.
func LoadAcceptorIDAs(dataDir, kind string) (string, error) {
	path := filepath.Join(dataDir, acceptorFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read acceptor id: %w", err)
	}
	id, err := newAcceptorID(kind)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dataDir, err)
	}
	// Write to a temporary file and rename, so a crash never leaves a
	// half-written id behind.
	tmp, err := os.CreateTemp(dataDir, acceptorFile+".*")
	if err != nil {
		return "", fmt.Errorf("save acceptor id: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("save acceptor id: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("save acceptor id: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("save acceptor id: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("save acceptor id: %w", err)
	}
	return id, nil
}

func newAcceptorID(kind string) (string, error) {
	host, _ := os.Hostname()
	host = sanitize(host)
	if host == "" {
		host = "host"
	}
	if len(host) > 40 {
		host = host[:40]
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	return kind + "-" + host + "-" + hex.EncodeToString(r[:]), nil
}
