package remote

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// maxSessionEnv bounds what ReadSessionEnv reads: the handover is four
// short variables.
const maxSessionEnv = 64 << 10

// ReadSessionEnv reads the spawn variables a worker hands the remote it
// pre-started (`outpost remote serve --session-from-stdin`): KEY=VALUE
// lines until EOF, each naming a variable of api.SpawnEnv by either name,
// and sets them with setenv. The worker starts such a remote while it is
// idle, with the rest of the spawn environment, so that the remote's
// start-up is done before a claim; it writes the session's variables at
// claim time and closes the pipe.
//
// It reports whether anything was read: nothing means the worker stopped
// (or was killed) without handing over a session, and the remote has
// nothing to serve.
//
// When r is also a writer (a worker gives the remote a socket), the remote
// first writes "ready" and a newline on it: it waits now, and a sandbox
// around it has been set up. On a read-only pipe that write fails, which
// is ignored.
func ReadSessionEnv(r io.Reader, setenv func(key, value string) error) (bool, error) {
	if w, ok := r.(io.Writer); ok {
		_, _ = io.WriteString(w, "ready\n")
	}
	sc := bufio.NewScanner(io.LimitReader(r, maxSessionEnv))
	sc.Buffer(make([]byte, 0, 4096), maxSessionEnv)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return false, fmt.Errorf("read the session from standard input: line %d is not KEY=VALUE", n+1)
		}
		if !isSpawnVar(k) {
			return false, fmt.Errorf("read the session from standard input: %s is not a spawn contract variable", k)
		}
		if err := setenv(k, v); err != nil {
			return false, fmt.Errorf("read the session from standard input: set %s: %w", k, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("more than %d bytes", maxSessionEnv)
		}
		return false, fmt.Errorf("read the session from standard input: %w", err)
	}
	return n > 0, nil
}

// isSpawnVar reports whether name is one of the spawn contract's variables.
func isSpawnVar(name string) bool {
	return slices.ContainsFunc(api.SpawnEnv, func(v api.EnvVar) bool { return slices.Contains(v.Names(), name) })
}
