package sockguard

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Restricted reports whether this process runs in a restricted session's
// network namespace: one whose interfaces include Interface.
func Restricted() (bool, error) {
	f, err := os.Open("/proc/self/net/dev")
	if err != nil {
		return false, fmt.Errorf("list the network interfaces: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, _, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(name) == Interface {
			return true, nil
		}
	}
	return false, s.Err()
}

// Apply installs the filter (DenyVsock) when the process runs in a
// restricted session's namespace, and does nothing otherwise. An error
// means the filter could not be installed there: the caller must not run
// session code.
func Apply() error {
	restricted, err := Restricted()
	if err != nil {
		return err
	}
	if !restricted {
		return nil
	}
	return DenyVsock()
}

// Refused is the errno a denied socket(2) gets: "permission denied", which
// no kernel answers for a family it merely lacks (that is
// EAFNOSUPPORT), so a program's error says a policy refused it.
const Refused = unix.EACCES

// seccomp_data offsets (linux/seccomp.h): the syscall number, the audit
// architecture, and the low 32 bits of the first argument on a
// little-endian machine.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
)

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retDeny  = unix.SECCOMP_RET_ERRNO | uint32(Refused)
	x32Bit   = 0x40000000
	// socketcall(2)'s call number for socket, on i386.
	sysSocketcallSocket = 1
)

// arch is the native audit architecture and socket(2)'s number on it.
type arch struct {
	audit  uint32
	socket uint32
}

func native() (arch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return arch{audit: unix.AUDIT_ARCH_X86_64, socket: 41}, nil
	case "arm64":
		return arch{audit: unix.AUDIT_ARCH_AARCH64, socket: 198}, nil
	}
	return arch{}, fmt.Errorf("no socket filter for %s", runtime.GOARCH)
}

// program is the filter: socket(AF_VSOCK, ...) gets Refused; on amd64 the
// x32 ABI's socket is checked alike, and a 32-bit (i386) program's socket
// and socketcall(SYS_SOCKET) are refused whatever the family, since
// socketcall's arguments lie in memory a filter cannot read. Everything
// else is allowed.
func program(a arch) ([]bpf.RawInstruction, error) {
	checkFamily := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_VSOCK, SkipFalse: 1},
		bpf.RetConstant{Val: retDeny},
		bpf.RetConstant{Val: retAllow},
	}
	var p []bpf.Instruction
	p = append(p, bpf.LoadAbsolute{Off: offArch, Size: 4})
	if a.audit == unix.AUDIT_ARCH_X86_64 {
		// i386 programs: socket (359) and socketcall (102) with
		// SYS_SOCKET are refused.
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AUDIT_ARCH_I386, SkipFalse: 8},
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 359, SkipTrue: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 102, SkipFalse: 4},
			bpf.LoadAbsolute{Off: offArg0, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: sysSocketcallSocket, SkipTrue: 1},
			bpf.RetConstant{Val: retAllow},
			bpf.RetConstant{Val: retDeny},
			bpf.RetConstant{Val: retAllow},
		)
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.audit, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow}, // an architecture without vsock sockets of its own
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	)
	if a.audit == unix.AUDIT_ARCH_X86_64 {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.socket | x32Bit, SkipTrue: 2})
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.socket, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
	)
	p = append(p, checkFamily...)
	return bpf.Assemble(p)
}

// DenyVsock installs, for every thread of this process and every process
// it starts from now on, a seccomp filter that refuses socket(AF_VSOCK)
// with Refused. It sets no_new_privs, which the kernel requires of a
// process without CAP_SYS_ADMIN: set-user-ID programs (sudo) no longer
// gain privileges in what this process starts.
func DenyVsock() error {
	a, err := native()
	if err != nil {
		return err
	}
	raw, err := program(a)
	if err != nil {
		return fmt.Errorf("assemble the socket filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs for the socket filter: %w", err)
	}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("install the socket filter: %w", errors.Join(errno))
	}
	return nil
}
