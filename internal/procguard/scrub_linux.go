package procguard

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// The kernel keeps a process's command line and environment as it started
// in two blocks of its memory (/proc/PID/stat fields 48 to 51), and
// /proc/PID/cmdline and /proc/PID/environ read them from there. Go's
// os.Args points into the first; the environment Go reads is a copy, so
// os.Unsetenv leaves the second as it was. Scrubbing writes zeros over a
// secret in those blocks, after checking that the memory found is what
// the kernel shows, and does nothing when it is not.

// startBlocks returns the command-line and environment blocks of this
// process, or ok false when they cannot be found with certainty.
func startBlocks() (args, env []byte, ok bool) {
	if len(os.Args) == 0 || len(os.Args[0]) == 0 {
		return nil, nil, false
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return nil, nil, false
	}
	// The command name, field 2, is in parentheses and may hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil, nil, false
	}
	fields := strings.Fields(string(stat[i+1:])) // from field 3 on
	field := func(n int) (uintptr, bool) {
		if n-3 >= len(fields) {
			return 0, false
		}
		v, err := strconv.ParseUint(fields[n-3], 10, 64)
		return uintptr(v), err == nil
	}
	argStart, ok1 := field(48)
	argEnd, ok2 := field(49)
	envStart, ok3 := field(50)
	envEnd, ok4 := field(51)
	base := unsafe.Pointer(unsafe.StringData(os.Args[0]))
	if !ok1 || !ok2 || !ok3 || !ok4 || uintptr(base) != argStart || argEnd < argStart || envEnd < envStart {
		return nil, nil, false
	}
	args = unsafe.Slice((*byte)(base), argEnd-argStart)
	env = unsafe.Slice((*byte)(unsafe.Add(base, int(envStart)-int(argStart))), envEnd-envStart)
	cmdline, err1 := os.ReadFile("/proc/self/cmdline")
	environ, err2 := os.ReadFile("/proc/self/environ")
	if err1 != nil || err2 != nil || !bytes.Equal(cmdline, args) || !bytes.Equal(environ, env) {
		return nil, nil, false
	}
	return args, env, true
}

func scrubEnvBlock(names []string) {
	_, env, ok := startBlocks()
	if !ok {
		return
	}
	for len(env) > 0 {
		entry := env
		if end := bytes.IndexByte(env, 0); end >= 0 {
			entry, env = env[:end], env[end+1:]
		} else {
			env = nil
		}
		name, _, found := bytes.Cut(entry, []byte("="))
		if found && slices.Contains(names, string(name)) {
			clear(entry[len(name)+1:])
		}
	}
}

func scrubArgBlock(value string) {
	args, _, ok := startBlocks()
	if !ok {
		return
	}
	v := []byte(value)
	for {
		i := bytes.Index(args, v)
		if i < 0 {
			return
		}
		clear(args[i : i+len(v)])
		args = args[i+len(v):]
	}
}
