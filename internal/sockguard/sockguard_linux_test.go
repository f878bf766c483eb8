package sockguard

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const childEnv = "SOCKGUARD_TEST_CHILD"

// TestMain runs the child modes: "filter" installs the filter and checks
// sockets, then runs itself again ("inherited") to check that what it
// starts is filtered too.
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "filter":
		if err := DenyVsock(); err != nil {
			fail("DenyVsock: %v", err)
		}
		check()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"=inherited")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fail("the child's child: %v", err)
		}
		os.Exit(0)
	case "inherited":
		check()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func fail(format string, args ...any) {
	os.Stderr.WriteString("sockguard child: ")
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(3)
}

// check: a vsock socket is refused with Refused, whatever the machine has;
// the other families still work.
func check() {
	if fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); !errors.Is(err, Refused) {
		if err == nil {
			unix.Close(fd)
		}
		fail("socket(AF_VSOCK) = %v, want %v", err, Refused)
	}
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6, unix.AF_UNIX} {
		fd, err := unix.Socket(fam, unix.SOCK_STREAM, 0)
		if err != nil {
			fail("socket(%d) = %v, want a socket", fam, err)
		}
		unix.Close(fd)
	}
}

func TestDenyVsockHoldsForChildren(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=filter")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestProgram runs the filter on the seccomp_data of calls of every
// architecture it decides, in the bpf package's virtual machine.
func TestProgram(t *testing.T) {
	a, err := native()
	if err != nil {
		t.Skip(err)
	}
	raw, err := program(a)
	if err != nil {
		t.Fatal(err)
	}
	var insns []bpf.Instruction
	for _, r := range raw {
		insns = append(insns, r.Disassemble())
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	data := func(nr, audit, arg0 uint32) []byte {
		b := make([]byte, 64)
		put := func(off int, v uint32) {
			// seccomp_data is native-endian; the VM loads big-endian.
			b[off], b[off+1], b[off+2], b[off+3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		}
		put(offNr, nr)
		put(offArch, audit)
		put(offArg0, arg0)
		return b
	}
	cases := []struct {
		name            string
		nr, audit, arg0 uint32
		want            uint32
	}{
		{"vsock", a.socket, a.audit, unix.AF_VSOCK, retDeny},
		{"inet", a.socket, a.audit, unix.AF_INET, retAllow},
		{"another call with the same argument", a.socket + 1, a.audit, unix.AF_VSOCK, retAllow},
	}
	if a.audit == unix.AUDIT_ARCH_X86_64 {
		cases = append(cases,
			struct {
				name            string
				nr, audit, arg0 uint32
				want            uint32
			}{"x32 vsock", a.socket | x32Bit, a.audit, unix.AF_VSOCK, retDeny},
			struct {
				name            string
				nr, audit, arg0 uint32
				want            uint32
			}{"x32 inet", a.socket | x32Bit, a.audit, unix.AF_INET, retAllow},
			struct {
				name            string
				nr, audit, arg0 uint32
				want            uint32
			}{"i386 socket", 359, unix.AUDIT_ARCH_I386, unix.AF_INET, retDeny},
			struct {
				name            string
				nr, audit, arg0 uint32
				want            uint32
			}{"i386 socketcall socket", 102, unix.AUDIT_ARCH_I386, sysSocketcallSocket, retDeny},
			struct {
				name            string
				nr, audit, arg0 uint32
				want            uint32
			}{"i386 socketcall connect", 102, unix.AUDIT_ARCH_I386, 3, retAllow},
			struct {
				name            string
				nr, audit, arg0 uint32
				want            uint32
			}{"i386 write", 4, unix.AUDIT_ARCH_I386, unix.AF_VSOCK, retAllow},
		)
	}
	for _, c := range cases {
		got, err := vm.Run(data(c.nr, c.audit, c.arg0))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if uint32(got) != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
}

func TestRestrictedByInterface(t *testing.T) {
	got, err := Restricted()
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat("/sys/class/net/" + Interface)
	if got != (statErr == nil) {
		t.Fatalf("Restricted() = %v, but /sys/class/net/%s: %v", got, Interface, statErr)
	}
}
