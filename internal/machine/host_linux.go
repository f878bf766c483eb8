package machine

import (
	"bufio"
	"os"
	"strings"
)

// cpuModel reads the first "model name" of /proc/cpuinfo ("" on CPUs
// whose kernel names none, as some arm64 ones).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// osVersion is PRETTY_NAME of /etc/os-release (else /usr/lib/os-release).
func osVersion() string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if v := parseOSRelease(string(b)); v != "" {
			return v
		}
	}
	return ""
}
