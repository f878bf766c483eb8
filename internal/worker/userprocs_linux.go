package worker

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// userProcesses lists the processes whose real, effective or saved uid is
// uid, zombies left out (they run nothing; their parent reaps them).
func userProcesses(uid uint32) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.FormatUint(uint64(uid), 10)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue // gone meanwhile
		}
		if procOf(b, want) {
			out = append(out, pid)
		}
	}
	return out
}

// procOf reports whether the /proc/<pid>/status content b is of a live
// process with the uid want as its real, effective or saved uid.
func procOf(b []byte, want string) bool {
	mine := false
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "State":
			if len(f) > 0 && f[0] == "Z" {
				return false
			}
		case "Uid":
			for i := 0; i < len(f) && i < 3; i++ {
				mine = mine || f[i] == want
			}
		}
	}
	return mine
}
