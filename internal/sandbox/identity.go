package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The account session code has inside a sandbox that root starts.
//
// Inside its user namespace a sandbox maps one id only: the caller's.
// Started by root, session code would be uid 0 there, and programs that
// run as uid 0 take for granted what real root can do: xterm, for one,
// gives up when it cannot chown its terminal to the tty group, a group
// the namespace does not map. As SessionUID those programs take the
// unprivileged path they take for any user, while the host still sees
// root: files the session writes stay root's, files root owns (the
// workspace) look like the session's own, so git's safe.directory check
// passes. No id is added to the namespace, no capability is kept, and
// nothing new is setuid: isolation is exactly what it was.
const (
	SessionUser = "outpost"
	SessionUID  = 1000
	SessionGID  = 1000
)

// Identity is who session code is inside a sandbox.
type Identity struct {
	// Args are bwrap's --uid and --gid; none keeps the caller's ids.
	Args []string
	// Binds show account files that name the sandbox's user, read-only
	// over /etc/passwd and /etc/group.
	Binds []Bind
	// User is the sandbox user's name for USER and LOGNAME; empty keeps
	// the caller's environment.
	User string
}

// IdentityFor returns the identity of session code in a sandbox started
// by the user euid. For root, it is SessionUser, whose account files it
// writes into dir (which must exist) with home as the user's HOME; for
// anyone else, the caller's own ids, as the namespace maps them anyway.
func IdentityFor(euid int, dir, home string) (Identity, error) {
	if euid != 0 {
		return Identity{}, nil
	}
	uid, gid := strconv.Itoa(SessionUID), strconv.Itoa(SessionGID)
	passwd := accountFile("/etc/passwd", 2, uid,
		SessionUser+":x:"+uid+":"+gid+":Outpost session:"+home+":/bin/sh")
	group := accountFile("/etc/group", 2, gid, SessionUser+":x:"+gid+":")
	id := Identity{Args: []string{"--uid", uid, "--gid", gid}, User: SessionUser}
	for name, data := range map[string][]byte{"passwd": passwd, "group": group} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return Identity{}, fmt.Errorf("write the sandbox's %s: %w", name, err)
		}
		id.Binds = append(id.Binds, Bind{Src: p, Dest: "/etc/" + name, ReadOnly: true})
	}
	return id, nil
}

// ProbeIdentityArgs are the identity arguments of a sandbox started by
// euid, for Probe (which needs no account files).
func ProbeIdentityArgs(euid int) []string {
	if euid != 0 {
		return nil
	}
	return []string{"--uid", strconv.Itoa(SessionUID), "--gid", strconv.Itoa(SessionGID)}
}

// accountFile is the host's account file at path (passwd or group) without
// the entries named SessionUser or whose id (field idField, 0-based) is
// id, and with entry added: the host's other users and groups keep their
// names inside the sandbox. A host without the file gets entry alone.
func accountFile(path string, idField int, id, entry string) []byte {
	var out bytes.Buffer
	if b, err := os.ReadFile(path); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			f := strings.Split(line, ":")
			if len(f) > idField && (f[0] == SessionUser || f[idField] == id) {
				continue
			}
			out.WriteString(line + "\n")
		}
	}
	out.WriteString(entry + "\n")
	return out.Bytes()
}
