package fleet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/atomicfile"
)

const (
	// acceptorFile is the name of the file in the data dir that keeps this
	// machine's acceptor id across restarts, so that a restarted consumer
	// can renew the claims it held.
	acceptorFile = "acceptor-id"
	// lockFile is the file in the data dir that the running consumer holds
	// locked (flock) for its whole life, with its pid inside.
	lockFile = "lock"
	// instanceFile keeps the instance id of the last process that held the
	// data dir. A process that takes the lock reads it, as the proof that
	// this instance is gone, and writes its own.
	instanceFile = "instance"
)

// ErrDataDirInUse is returned by OpenIdentity when another running process
// holds the data dir.
var ErrDataDirInUse = errors.New("data dir in use")

// Identity is who claims: an acceptor id, the lock on the data dir that
// keeps it, and the random instance id of this process that the server
// checks heartbeats against (two live processes never share an acceptor
// id). Close releases the lock.
type Identity struct {
	// AcceptorID names the consumer in claims.
	AcceptorID string
	// Kind is api.WorkerKindWorker or api.WorkerKindOrchestrator.
	Kind string
	// Instance is this process's random id, announced with every
	// heartbeat; "" when the process shares its acceptor id by design
	// (a worker serving one session an orchestrator claimed).
	Instance string
	// Previous is the instance of the process that held the data dir
	// before this one ("" when unknown). This process holding the lock
	// proves that one gone, however it ended (even a zombie whose pid
	// still answers): its presence may be taken over at once, and the
	// claims it held are not served by anyone.
	Previous string
	// Hint ends the error refusing a second process under the acceptor id:
	// what to do about it.
	Hint string
	lock *os.File
}

// IdentityOptions say where an identity lives.
type IdentityOptions struct {
	// Dir is the data dir holding the acceptor-id file and the lock.
	Dir string
	// DirName names Dir in errors ("worker data dir").
	DirName string
	// Kind starts a generated acceptor id ("worker-<host>-<random>") and
	// is the presence's kind.
	Kind string
	// AcceptorID, when set, is used instead of the one saved in Dir.
	AcceptorID string
	// Shared marks an acceptor id this process shares by design; it then
	// announces no instance.
	Shared bool
	// DirHint ends the error refusing a second process on Dir; Hint the
	// one refusing a second process under the acceptor id.
	DirHint, Hint string
}

// OpenIdentity locks o.Dir (created if needed) for this process, or
// returns an error matching ErrDataDirInUse that names the holder, and
// loads the acceptor id (o.AcceptorID, else the saved one, generated and
// saved the first time). The lock goes with the process, however it ends.
func OpenIdentity(o IdentityOptions) (*Identity, error) {
	f, err := lockDir(o.Dir, o.DirName, o.Kind, o.DirHint)
	if err != nil {
		return nil, err
	}
	id := &Identity{AcceptorID: o.AcceptorID, Kind: o.Kind, Hint: o.Hint, lock: f}
	if id.AcceptorID == "" {
		if id.AcceptorID, err = LoadAcceptorID(o.Dir, o.Kind); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := api.ValidateAcceptorID(id.AcceptorID); err != nil {
		f.Close()
		return nil, err
	}
	if !o.Shared {
		id.Instance = NewInstanceID()
		if id.Previous, err = swapInstance(o.Dir, id.Instance); err != nil {
			f.Close()
			return nil, err
		}
	}
	return id, nil
}

// swapInstance returns the instance id saved in dir by the data dir's
// previous holder ("" when none) and saves instance in its place. It is
// called with the data dir locked.
func swapInstance(dir, instance string) (string, error) {
	path := filepath.Join(dir, instanceFile)
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the previous instance id: %w", err)
	}
	prev := strings.TrimSpace(string(b))
	if err := atomicfile.Write(path, []byte(instance+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save the instance id: %w", err)
	}
	return prev, nil
}

// NewIdentity is an identity kept by something other than a data dir (the
// Kubernetes operator keeps its acceptor id in a ConfigMap and one live
// process under it by leader election): no lock, and no instance, so a new
// leader takes over the presence at once.
func NewIdentity(acceptorID, kind string) (*Identity, error) {
	if err := api.ValidateAcceptorID(acceptorID); err != nil {
		return nil, err
	}
	return &Identity{AcceptorID: acceptorID, Kind: kind}, nil
}

// Close releases the data dir's lock; the pid stays in the file, which
// only a lock holder trusts.
func (id *Identity) Close() {
	if id != nil && id.lock != nil {
		Unlock(id.lock)
	}
}

// dirInUseError names the data dir and the process holding it.
type dirInUseError struct {
	dir, dirName, kind, hint string
	pid                      int // 0: unknown
}

func (e *dirInUseError) Error() string {
	holder := "another " + e.kind
	if e.pid > 0 {
		holder = fmt.Sprintf("another %s (pid %d)", e.kind, e.pid)
	}
	return fmt.Sprintf("the %s %s is in use by %s: two %ss must never share one. %s", e.dirName, e.dir, holder, e.kind, e.hint)
}

func (e *dirInUseError) Unwrap() error { return ErrDataDirInUse }

func lockDir(dir, dirName, kind, hint string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dirName, err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the %s's lock file: %w", kind, err)
	}
	held, err := TryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if !held {
		b, _ := os.ReadFile(path)
		f.Close()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return nil, &dirInUseError{dir: dir, dirName: dirName, kind: kind, hint: hint, pid: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// LoadAcceptorID returns the acceptor id saved in dataDir, generating and
// saving "<kind>-<hostname>-<random>" (mode 0600) the first time; an id
// already saved is kept whatever it starts with.
func LoadAcceptorID(dataDir, kind string) (string, error) {
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
	// Written whole, so a crash never leaves a half-written id behind.
	if err := atomicfile.Write(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("save acceptor id: %w", err)
	}
	return id, nil
}

func newAcceptorID(kind string) (string, error) {
	host, _ := os.Hostname()
	host = Label(host)
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

// NewInstanceID returns a random id for this process.
func NewInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Label keeps the letters, digits and dashes of s, lowercased, with dots
// and underscores turned into dashes: a host or directory name made fit
// for an acceptor id or a path of the worker's data.
func Label(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == '.' || r == '_':
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
