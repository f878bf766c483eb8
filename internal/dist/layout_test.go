package dist

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, id := range []string{"abcdef", "0123456789ab", strings.Repeat("f", 40)} {
		if !ValidID(id) || CheckID(id) != nil {
			t.Errorf("ValidID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "abcde", strings.Repeat("a", 41), "ABCDEF", "abcdeg", "abc def", "../abcdef", "abcdef\n"} {
		if ValidID(id) {
			t.Errorf("ValidID(%q) = true", id)
		}
		if err := CheckID(id); err == nil || !strings.Contains(err.Error(), "6 to 40 lower-case hex digits") {
			t.Errorf("CheckID(%q) = %v", id, err)
		}
	}
}

func TestSameID(t *testing.T) {
	full := "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d"
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"1a2b3c4d5e6f", "1a2b3c4d5e6f", true},
		{"1a2b3c", "1a2b3c4d5e6f", true},
		{full, "1a2b3c4d5e6f", true},
		{"1a2b3d", "1a2b3c4d5e6f", false},
		{"1a2b3", "1a2b3c4d5e6f", false}, // too short to be an id
		{"", "1a2b3c4d5e6f", false},
	} {
		if got := SameID(tc.a, tc.b); got != tc.want {
			t.Errorf("SameID(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestNames(t *testing.T) {
	if got := LatestName(SuffixLinuxX64); got != "latest_linux_x64" {
		t.Errorf("LatestName = %q", got)
	}
	if got := BinaryName("abc123", SuffixMacOSArm64); got != "devin-remote_abc123_macos_arm64" {
		t.Errorf("BinaryName = %q", got)
	}
	if got := ChecksumName("abc123", SuffixWindowsX64); got != "devin-remote_abc123_windows_x64.exe.sha256" {
		t.Errorf("ChecksumName = %q", got)
	}
	sum := strings.Repeat("0f", 32)
	if got := CheckLine(sum, SuffixLinuxArm64); got != sum+"  devin-remote\n" {
		t.Errorf("CheckLine = %q", got)
	}
	if got := CheckLine(sum, SuffixWindowsX64); got != sum+"  devin-remote.exe\n" {
		t.Errorf("CheckLine windows = %q", got)
	}
	for _, line := range []string{sum + "  devin-remote\n", strings.ToUpper(sum) + " *other\n", sum} {
		if got, err := ParseCheckLine([]byte(line)); err != nil || got != sum {
			t.Errorf("ParseCheckLine(%q) = %q, %v", line, got, err)
		}
	}
	for _, line := range []string{"", "abc  devin-remote\n", strings.Repeat("g", 64) + "  x"} {
		if _, err := ParseCheckLine([]byte(line)); err == nil {
			t.Errorf("ParseCheckLine(%q) accepted", line)
		}
	}
	for s, want := range map[string]string{
		"darwin/arm64": SuffixMacOSArm64, "linux/amd64": SuffixLinuxX64, "linux/arm64": SuffixLinuxArm64,
		"windows/amd64": SuffixWindowsX64, "darwin/amd64": SuffixMacOSX64, "windows/arm64": SuffixWindowsArm64,
		"linux/386": "", "windows/386": "", "freebsd/amd64": "",
	} {
		goos, goarch, _ := strings.Cut(s, "/")
		if got := Suffix(goos, goarch); got != want {
			t.Errorf("Suffix(%s) = %q, want %q", s, got, want)
		}
	}
}

func TestParseName(t *testing.T) {
	for in, want := range map[string]Name{
		"latest_linux_x64":                            {Kind: KindLatest, Suffix: SuffixLinuxX64},
		"latest_windows_x64.exe":                      {Kind: KindLatest, Suffix: SuffixWindowsX64},
		"latest_windows_x64":                          {Kind: KindLatest, Suffix: SuffixWindowsX64},
		"latest_windows_arm64":                        {Kind: KindLatest, Suffix: SuffixWindowsArm64},
		"latest_macos_x64":                            {Kind: KindLatest, Suffix: SuffixMacOSX64},
		"devin-remote_abc123_windows_arm64.exe":       {Kind: KindBinary, ID: "abc123", Suffix: SuffixWindowsArm64},
		"devin-remote_abc123_macos_x64.sha256":        {Kind: KindChecksum, ID: "abc123", Suffix: SuffixMacOSX64},
		"devin-remote_abc123_linux_arm64":             {Kind: KindBinary, ID: "abc123", Suffix: SuffixLinuxArm64},
		"devin-remote_abc123_windows_x64.exe":         {Kind: KindBinary, ID: "abc123", Suffix: SuffixWindowsX64},
		"devin-remote_abc123_macos_arm64.sha256":      {Kind: KindChecksum, ID: "abc123", Suffix: SuffixMacOSArm64},
		"devin-remote_abc123_windows_x64.exe.sha256":  {Kind: KindChecksum, ID: "abc123", Suffix: SuffixWindowsX64},
		"devin-remote_0123456789abcdef0123_linux_x64": {Kind: KindBinary, ID: "0123456789abcdef0123", Suffix: SuffixLinuxX64},
	} {
		got, ok := ParseName(in)
		if !ok || got != want {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v", in, got, ok, want)
		}
		if ok && want.Kind != KindLatest && got.String() != in {
			t.Errorf("Name(%q).String() = %q", in, got.String())
		}
	}
	for _, in := range []string{
		"", "latest_", "latest_linux", "latest_macos_x86", "latest_windows_", "latest_windows_arm64.exe.exe", "devin-remote", "devin-remote_abc123",
		"devin-remote_ABC123_linux_x64", "devin-remote_abc12_linux_x64", "devin-remote_abc123_linux_x64.sha",
		"../devin-remote_abc123_linux_x64", "devin-remote_abc123_linux_x64/", "devin-remote_abc123_../../etc/passwd",
		"admin-token", "outpost.db", ".", "..",
	} {
		if n, ok := ParseName(in); ok {
			t.Errorf("ParseName(%q) = %+v, want refused", in, n)
		}
	}
}

func TestIsRemoteName(t *testing.T) {
	for _, argv0 := range []string{
		"devin-remote", "/cache/remote/abc123_linux_x64/devin-remote", `C:\cache\devin-remote.exe`, "DEVIN-REMOTE.EXE",
		"./devin-remote_abc123_linux_x64", "devin-remote_abc123_windows_x64.exe",
	} {
		if !IsRemoteName(argv0) {
			t.Errorf("IsRemoteName(%q) = false", argv0)
		}
	}
	for _, argv0 := range []string{"outpost", "/usr/bin/outpost", "devin", "devin-remote-helper", "devin-remote_abc123_linux_x64.sha256", "remote"} {
		if IsRemoteName(argv0) {
			t.Errorf("IsRemoteName(%q) = true", argv0)
		}
	}
}

func TestIDFromBuild(t *testing.T) {
	info := func(settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	rev := "1A2B3C4D5E6F7A8B9C0D1A2B3C4D5E6F7A8B9C0D"
	for _, tc := range []struct {
		name string
		set  string
		info func() (*debug.BuildInfo, bool)
		want string
	}{
		{"ldflags win", "feedface0001", info("vcs.revision", rev), "feedface0001"},
		{"invalid ldflags ignored", "v1.2.3", info("vcs.revision", rev), "1a2b3c4d5e6f"},
		{"clean revision", "", info("vcs.revision", rev, "vcs.modified", "false"), "1a2b3c4d5e6f"},
		{"modified tree", "", info("vcs.revision", rev, "vcs.modified", "true"), ""},
		{"no vcs", "", info(), ""},
		{"no build info", "", func() (*debug.BuildInfo, bool) { return nil, false }, ""},
	} {
		if got := idFromBuild(tc.set, tc.info); got != tc.want {
			t.Errorf("%s: idFromBuild = %q, want %q", tc.name, got, tc.want)
		}
	}
	// A test binary has no VCS stamp: its id is its own hash.
	id, err := SelfID()
	if err != nil || !ValidID(id) || len(id) != 12 {
		t.Fatalf("SelfID = %q, %v", id, err)
	}
}
