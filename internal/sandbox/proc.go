package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Status is what bwrap writes to its --json-status-fd: the host pid of the
// sandbox's init and its pid namespace once it runs, the exit code at the
// end.
type Status struct {
	ChildPid     int    `json:"child-pid"`
	PidNamespace uint64 `json:"pid-namespace"`
	ExitCode     *int   `json:"exit-code"`
}

// ReadStatus merges the JSON documents bwrap wrote to r.
func ReadStatus(r io.Reader) Status {
	var st Status
	b, err := io.ReadAll(r)
	if err != nil {
		return st
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var doc Status
		if dec.Decode(&doc) != nil {
			return st
		}
		if doc.ChildPid > 0 {
			st.ChildPid, st.PidNamespace = doc.ChildPid, doc.PidNamespace
		}
		if doc.ExitCode != nil {
			st.ExitCode = doc.ExitCode
		}
	}
}

// ChildPids lists the children of pid.
func ChildPids(pid int) []int {
	var out []int
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// CommandPids lists the host pids of the command a bwrap process (pid)
// runs: bwrap's child is the sandbox's init, whose children run the
// command. They are the processes to signal to stop the command gracefully:
// a signal to bwrap itself kills the sandbox at once.
func CommandPids(bwrapPid int) []int {
	var out []int
	for _, init := range ChildPids(bwrapPid) {
		out = append(out, ChildPids(init)...)
	}
	return out
}
